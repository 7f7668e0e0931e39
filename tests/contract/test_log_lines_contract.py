"""Contract 4: the built-in engine's `Decode batch` / `Prefill batch` lines are byte-identical to
what SGLang's own reporter (SchedulerMetricsReporter.report_decode_stats / report_prefill_stats)
prints for the same counters and the same clock, and specwatch parses the real reporter's output,
the real `server_args={...}` line and the real failure lines of a dead launch."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.scheduler_components import metrics_reporter as mr
from sglang.srt.managers.scheduler_components.pool_stats_observer import PoolStats
from sglang.srt.observability.metrics_collector import QueueCount
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from specwatch.logs import parse
from specwatch.engine import sglang_log

# (batch size, accepted drafts, generated tokens) per decode step; one line every INTERVAL steps
STEPS = [(3, 5, 8), (3, 2, 5), (2, 4, 6), (2, 0, 2), (4, 9, 13), (4, 7, 11), (1, 3, 4), (1, 0, 1)]
INTERVAL = 4


class Clock:
    """perf_counter for both reporters: the same instants, so throughputs are the same numbers."""

    def __init__(self, times):
        self.times = list(times)

    def perf_counter(self):
        return self.times.pop(0)


def _real_reporter(device: str, algo: SpeculativeAlgorithm, draft_tokens: int | None,
                   waiting: int, pool: PoolStats):
    sched = SimpleNamespace(
        device=device, spec_algorithm=algo, disaggregation_mode=DisaggregationMode.NULL,
        waiting_queue=[object()] * waiting, forward_ct=0, running_batch=None,
        pool_stats_observer=SimpleNamespace(get_pool_stats=lambda: pool),
        kv_events_publisher=SimpleNamespace(publish_kv_events=lambda: None),
        draft_worker=None)
    rep = mr.SchedulerMetricsReporter.__new__(mr.SchedulerMetricsReporter)
    rep.scheduler = sched
    rep.current_scheduler_metrics_enabled = False
    rep.is_stats_logging_rank = True
    rep.enable_mfu_metrics = False
    rep.decode_log_interval = INTERVAL
    rep.forward_ct_decode = 0
    rep.num_generated_tokens = 0
    rep.stats = SimpleNamespace()
    rep.last_gen_throughput = rep.last_input_throughput = 0.0
    for k in ("spec_num_accept_tokens", "spec_num_correct_drafts", "spec_num_forward_ct",
              "spec_num_block_accept_tokens", "spec_num_cap_tokens",
              "spec_total_num_accept_tokens", "spec_total_num_forward_ct"):
        setattr(rep, k, 0)
    rep._graph_backend_label = {"cpu": "cpu graph", "npu": "npu graph", "musa": "musa graph"}.get(
        device, "cuda graph")
    return rep


@pytest.fixture
def patched(monkeypatch):
    """The reporter reads the published runtime config bags (spec, disagg); publish stand-ins."""
    def install(draft_tokens, steps, times):
        monkeypatch.setattr(mr, "get_spec", lambda: SimpleNamespace(
            speculative_num_draft_tokens=draft_tokens, speculative_num_steps=steps))
        monkeypatch.setattr(mr, "get_disagg", lambda: SimpleNamespace(
            language_only=False, encoder_transfer_backend=None))
        monkeypatch.setattr(mr, "time", Clock(times))
        monkeypatch.setattr(sglang_log, "time", Clock(times))
    return install


def _capture(caplog):
    return [r.getMessage() for r in caplog.records if r.name == mr.__name__]


@pytest.mark.parametrize("device, spec, graph_used", [
    ("cpu", True, False), ("cuda", True, True), ("cpu", False, False)])
def test_decode_lines_byte_identical(patched, caplog, device, spec, graph_used):
    draft_tokens = 4 if spec else None
    # clock: engine init (decode tic, prefill tic), then per line one reading each side
    times = [100.0, 100.0] + [101.25, 103.5]
    patched(draft_tokens, 3, times)
    metrics = sglang_log.DecodeMetrics(INTERVAL, draft_tokens)
    real_times = [100.0, 101.25, 101.25, 103.5, 103.5]   # tic at start, then (gap, tic) per line
    pool = PoolStats(full_num_used=1234, full_token_usage=0.0371, full_available_size=30000,
                     full_evictable_size=0)
    rep = _real_reporter(device, SpeculativeAlgorithm.EAGLE3 if spec else SpeculativeAlgorithm.NONE,
                         draft_tokens, waiting=2, pool=pool)
    mr.time = Clock(real_times)
    rep.last_decode_stats_tic = mr.time.perf_counter()
    caplog.set_level(logging.INFO, logger=mr.__name__)
    mine = []
    for bs, accepted, generated in STEPS:
        batch = SimpleNamespace(reqs=[object()] * bs, forward_iter=None, dp_cooperation_info=None)
        rep.num_generated_tokens += generated
        if spec:
            rep.update_spec_metrics(bs, accepted, num_accept_tokens=generated)
        rep.forward_ct_decode += 1
        rep.report_decode_stats(graph_used, running_batch=batch, num_generated_tokens=generated)
        if metrics.record_step(bs, accepted, generated):
            w = metrics.close_window()
            mine.append(sglang_log.decode_line(
                num_running_reqs=bs, num_tokens=pool.full_num_used,
                token_usage=pool.full_token_usage, accept_len=w.accept_len,
                accept_rate=w.accept_rate, graph=sglang_log.graph_label(device),
                gen_throughput_tok_s=w.gen_throughput_tok_s, num_queue_reqs=2,
                graph_used=graph_used))
    real = _capture(caplog)
    assert len(real) == 2 and mine == real
    if spec:
        assert "accept len: " in real[0]
    # specwatch parses the real reporter's line into the same numbers
    for line in real:
        rec = parse.parse_line(f"[2026-12-01 10:00:00] {line}")
        assert rec.kind == "sglang_decode", line
        assert rec.fields["running_req"] == int(line.split("#running-req: ")[1].split(",")[0])
        assert rec.fields["gen_throughput"] == float(line.split("(token/s): ")[1].split(",")[0])
        if spec:
            assert rec.fields["accept_len"] == float(line.split("accept len: ")[1].split(",")[0])


def test_prefill_line_byte_identical(patched, caplog):
    patched(4, 3, [50.0, 50.0, 52.5])
    metrics = sglang_log.DecodeMetrics(INTERVAL, 4)
    pool = PoolStats(full_num_used=600, full_token_usage=0.0184, full_available_size=30000,
                     full_evictable_size=0)
    rep = _real_reporter("cpu", SpeculativeAlgorithm.EAGLE3, 4, waiting=3, pool=pool)
    mr.time = Clock([52.5])
    rep.last_prefill_stats_tic = 50.0
    caplog.set_level(logging.INFO, logger=mr.__name__)
    stats = mr.PrefillStats(log_input_tokens=517, log_hit_tokens=64, new_token_ratio=0.4,
                            num_running_reqs=QueueCount(total=2), num_new_seqs=3,
                            num_pending_tokens=0)
    rep.report_prefill_stats(None, stats, False)
    mine = sglang_log.prefill_line(
        num_new_seqs=3, num_new_tokens=517, num_cached_tokens=64, token_usage=0.0184,
        num_running_reqs=2, num_queue_reqs=3, num_pending_tokens=0, graph="cpu graph",
        input_throughput_tok_s=metrics.prefill_throughput(517))
    assert _capture(caplog) == [mine]
    rec = parse.parse_line(f"[2026-12-01 10:00:00] {mine}")
    assert rec.kind == "sglang_prefill" and rec.fields["new_token"] == 517
    assert rec.fields["input_throughput"] == float(mine.split("(token/s): ")[1])


def test_real_server_args_line_parses_to_the_launched_fields(tmp_path):
    """The line `Engine` logs (`server_args={_server_args_for_logging(resolved args)}`), built by
    SGLang's own code from a resolved ServerArgs, parses into the fields that were asked for."""
    import json

    from sglang.srt.entrypoints.engine import _server_args_for_logging
    from sglang.srt.server_args import prepare_server_args

    target, draft = tmp_path / "target", tmp_path / "draft"
    for d, arch in ((target, "LlamaForCausalLM"), (draft, "LlamaForCausalLMEagle3")):
        d.mkdir()
        (d / "config.json").write_text(json.dumps({
            "architectures": [arch], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256}))
    sa = prepare_server_args(["--model-path", str(target), "--device", "cpu",
                              "--speculative-algorithm", "EAGLE3",
                              "--speculative-draft-model-path", str(draft),
                              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                              "--speculative-num-draft-tokens", "4", "--tp-size", "1",
                              "--decode-log-interval", "8"])
    sa.resolve_once()
    line = f"[2026-12-01 10:00:00] server_args={_server_args_for_logging(sa)}"
    rec = parse.parse_line(line)
    assert rec.kind == "server_args" and rec.form == "dict", rec
    f = rec.fields
    assert (f["model_path"], f["speculative_draft_model_path"], f["speculative_algorithm"]) == \
        (str(target), str(draft), "EAGLE3")
    assert (f["speculative_num_steps"], f["speculative_eagle_topk"],
            f["speculative_num_draft_tokens"], f["tp_size"], f["decode_log_interval"]) == \
        (3, 1, 4, 1, 8)
