"""One scheduler per DP rank: continuous batching over a SpecDecoder, in its own thread.

A scheduler owns one `SpecDecoder` (decode.py) and runs SGLang's loop: take new requests,
prefill them as one batch (prefill has priority, no mixed batches), otherwise run one decode
(draft + verify) step over the running batch. It applies stop strings / stop token ids (the
decoder only knows max_new_tokens), sends each request's new tokens to its output queue, and
prints SGLang's `Prefill batch` / `Decode batch` lines with its rank tag.

Not here: HTTP, JSON, text assembly (server.py), the log formats and counters (sglang_log.py).
"""

from __future__ import annotations

import os
import queue
import uuid
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from specwatch.engine import sglang_log, tokenizer
from specwatch.engine.args import ServerArgs


@dataclass
class TokenEvent:
    """New output token ids of request `index` (of its HTTP call), in order."""

    index: int
    new_ids: list[int]
    spec_verify_ct: int


@dataclass
class FinishEvent:
    """Request `index` is done: its final output ids (cut at a stop) and SGLang meta fields."""

    index: int
    new_ids: list[int]  # the tokens not sent in a TokenEvent yet
    output_ids: list[int]
    finish_reason: dict[str, Any]
    spec: dict[str, Any] | None  # spec_verify_ct, spec_accepted_drafts, histogram; None w/o spec


@dataclass
class ErrorEvent:
    """Request `index` was aborted (server shutting down or scheduler failure)."""

    index: int
    message: str
    status: int = 503  # 400 when the decoder refused the request itself


@dataclass
class GenRequest:
    """One generation as the scheduler sees it; `out` receives its events."""

    rid: str
    index: int
    input_ids: list[int]
    max_new_tokens: int
    out: "queue.Queue[TokenEvent | FinishEvent | ErrorEvent]"
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: set[int] = field(default_factory=set)
    aborted: bool = False  # set by the HTTP thread when the client goes away
    dreq: Any = None  # decode.Request, built at admission
    emitted: int = 0  # output ids already sent to `out`


class Scheduler(threading.Thread):
    """A DP rank: its own decoder, queue, counters and log tag."""

    def __init__(self, args: ServerArgs, *, dp_rank: int | None, device: str, context_len: int,
                 on_fatal: Callable[[BaseException], None]) -> None:
        super().__init__(name=f"scheduler-dp{dp_rank or 0}", daemon=True)
        self.args = args
        self.dp_rank = dp_rank
        self.device = device
        self.context_len = context_len
        self.on_fatal = on_fatal
        self.log = sglang_log.scheduler_logger(sglang_log.rank_tag(dp_rank, args.tp_size))
        self.graph = sglang_log.graph_label(device)
        spec = args.speculative_algorithm is not None
        self.metrics = sglang_log.DecodeMetrics(
            args.decode_log_interval, args.speculative_num_draft_tokens if spec else None)
        self.inbox: queue.Queue = queue.Queue()
        self.waiting: list[GenRequest] = []
        self.running: list[GenRequest] = []
        self.loaded = threading.Event()
        self.load_error: BaseException | None = None
        self.decoder: Any = None
        self.adaptive: Any = None  # adaptive.AdaptiveParams with --speculative-adaptive
        self.max_total_num_tokens = 0
        self.max_running_requests = 0
        self.tokens_in_use = 0  # refreshed by the scheduler thread after every batch
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.spec_verify_calls_total = 0   # SGLang: Σ spec_verify_ct of finished requests
        self.spec_active_steps = 0         # steps of the last verify (the adaptive tier's)
        self._stopping = False

    # ------------------------------------------------------------------ called from other threads

    def submit(self, req: GenRequest) -> None:
        self.inbox.put(("req", req))

    def flush_cache(self, timeout_s: float = 30.0) -> bool:
        """SGLang's Scheduler.flush_cache: only when nothing is queued or running."""
        reply: queue.Queue = queue.Queue()
        self.inbox.put(("flush", reply))
        try:
            return reply.get(timeout=timeout_s)
        except queue.Empty:
            return False

    def stop(self) -> None:
        self._stopping = True
        self.inbox.put(("wake", None))

    def state(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting) + self.inbox.qsize(),
            "num_used_tokens": self.tokens_in_use,
            "token_usage": self.tokens_in_use / self.max_total_num_tokens if self.max_total_num_tokens else 0.0,
            "last_gen_throughput": m.last_gen_throughput,
            "spec_accept_length": m.last_accept_len,
            "spec_accept_rate": m.last_accept_rate,
            "avg_spec_accept_length": m.avg_spec_accept_length(),
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "spec_verify_calls_total": self.spec_verify_calls_total,
            # SGLang's active spec config gauges, set with the decode line; 0 without speculation
            "spec_num_steps": self.spec_active_steps if m.last_accept_len is not None else 0,
            "spec_num_draft_tokens": self._draft_tokens(self.spec_active_steps)
            if m.last_accept_len is not None else 0,
        }

    def _draft_tokens(self, steps: int) -> int:
        """Draft tokens per verify at `steps`: steps + 1 for a chain (topk 1), else the flag's."""
        a = self.args
        if (a.speculative_eagle_topk or 1) == 1:
            return steps + 1
        return a.speculative_num_draft_tokens or 0

    # ------------------------------------------------------------------ scheduler thread

    def run(self) -> None:
        try:
            self._load()
        except BaseException as e:  # reported to main() through load_error
            self.load_error = e
            self.loaded.set()
            return
        self.loaded.set()
        try:
            while not self._stopping:
                self._drain_inbox(block=not self.running and not self.waiting)
                self._drop_aborted()
                batch = self._admit()
                kind = "prefill" if batch else "decode"
                try:
                    if batch:
                        self._prefill(batch)
                    elif self.running:
                        self._decode()
                except Exception as e:  # this batch's requests fail, the server keeps serving
                    self._fail_batch(kind, batch or list(self.running), e)
        except BaseException as e:
            self.log.error(f"Scheduler hit an exception: {traceback.format_exc()}")
            self._abort_all(f"scheduler failed: {e}")
            self.on_fatal(e)
            return
        self._abort_all("server is shutting down")

    def _load(self) -> None:
        from specwatch.engine import adaptive, decode  # torch: imported in the thread, lazily

        self.decode_mod = decode
        a = self.args
        spec = a.speculative_algorithm is not None
        avail_before = _avail_mem_gb()
        self.log.info(f"Load weight begin. avail mem={avail_before:.2f} GB")
        tic = time.perf_counter()
        kwargs: dict[str, Any] = dict(device=self.device, max_total_tokens=a.max_total_tokens,
                                      cuda_graph=not a.disable_cuda_graph, cuda_graph_max_bs=a.cuda_graph_max_bs)
        if a.random_seed is not None:
            kwargs["seed"] = a.random_seed
        steps, draft_tokens = a.speculative_num_steps, a.speculative_num_draft_tokens
        if spec and a.speculative_adaptive:
            # SGLang sizes its states by every candidate: the decoder runs 0..max steps per step
            self.adaptive = adaptive.AdaptiveParams(
                a.speculative_num_steps, a.speculative_adaptive_config,
                log=self.log.info if not self.dp_rank else (lambda msg: None))  # rank 0 logs
            steps = max(self.adaptive.candidate_steps)
            draft_tokens = steps + 1
        if spec:
            self.decoder = decode.SpecDecoder(
                a.model_path, a.speculative_draft_model_path, num_steps=steps,
                topk=a.speculative_eagle_topk, num_draft_tokens=draft_tokens,
                **kwargs)
            self.decoder.skip_zero_step_extend = _env_true("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND")
        else:
            self.decoder = decode.SpecDecoder(a.model_path, None, **kwargs)
        elapsed = time.perf_counter() - tic
        avail = _avail_mem_gb()
        # The decoder loads both models in one call; split the time by weight-file size.
        sizes = {"target": _weights_bytes(a.model_path)}
        if spec:
            sizes["draft"] = _weights_bytes(a.speculative_draft_model_path)
        total = sum(sizes.values()) or 1
        for name, size in sizes.items():
            arch = "LlamaForCausalLMEagle3" if name == "draft" else "LlamaForCausalLM"
            # fp16 on disk, fp32 in memory
            self.log.info(
                f"Load weight end. elapsed={elapsed * size / total:.2f} s, type={arch}, "
                f"dtype=torch.float32, avail mem={avail:.2f} GB, mem usage={2 * size / 2**30:.2f} GB.")
        if self.decoder.graphs is not None and self.decoder.graphs.capture:
            # SGLang's CudaGraphRunner lines; the graphs cover greedy decode steps (graph_step.py).
            import torch

            free0 = torch.cuda.mem_get_info(self.decoder.device)[0] / 2**30
            self.log.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={free0:.2f} GB")
            tic = time.perf_counter()
            self.decoder.capture_cuda_graphs()
            free1 = torch.cuda.mem_get_info(self.decoder.device)[0] / 2**30
            self.log.info(f"Capture cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. "
                          f"mem usage={max(free0 - free1, 0.0):.2f} GB. avail mem={free1:.2f} GB.")
        if self.adaptive is not None and self.decoder.graphs is not None and self.decoder.graphs.capture:
            self.adaptive.set_cuda_graph_bs(self.decoder.graphs.buckets)  # routing pads as SGLang's
        self.max_total_num_tokens = int(self.decoder.max_total_num_tokens)
        # The decoder keeps one full-context KV slot per running request.
        slots = max(1, self.max_total_num_tokens // int(getattr(self.decoder, "context_len", 1) or 1))
        self.max_running_requests = min(a.max_running_requests or slots, slots)
        self.log.info(
            f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size="
            f"{a.chunked_prefill_size}, max_prefill_tokens={a.max_prefill_tokens}, "
            f"max_running_requests={self.max_running_requests}, context_len={self.context_len}, "
            f"available_gpu_mem={avail:.2f} GB")

    def _drain_inbox(self, block: bool) -> None:
        try:
            item = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, payload = item
            if kind == "req":
                self.waiting.append(payload)
            elif kind == "flush":
                payload.put(self._flush())
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _flush(self) -> bool:
        if self.waiting or self.running:
            self.log.warning(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {len(self.waiting)}, #running-req: {len(self.running)}")
            return False
        self.decoder.flush_cache()
        self.metrics.reset()
        self.tokens_in_use = self.decoder.tokens_in_use()
        self.log.info("Cache flushed successfully!")
        return True

    def _drop_aborted(self) -> None:
        if any(r.aborted for r in self.waiting):
            self.waiting = [r for r in self.waiting if not r.aborted]
        for r in [r for r in self.running if r.aborted]:
            self.running.remove(r)
            self.decoder.release(r.dreq)
            self.tokens_in_use = self.decoder.tokens_in_use()

    def _admit(self) -> list[GenRequest]:
        """FCFS up to max_running_requests; the decoder has one full-context KV slot per request,
        so a request that passed the context-length check always fits a free slot."""
        batch: list[GenRequest] = []
        while self.waiting and len(self.running) + len(batch) < self.max_running_requests:
            r = self.waiting.pop(0)
            r.dreq = self.decode_mod.Request(  # own rid: clients may reuse theirs
                rid=uuid.uuid4().hex, input_ids=list(r.input_ids), max_new_tokens=r.max_new_tokens,
                temperature=r.temperature, top_p=r.top_p, seed=r.seed)
            batch.append(r)
        return batch

    def _prefill(self, batch: list[GenRequest]) -> None:
        """Prefill the batch one request at a time (as the decoder does), log one line for it."""
        num_running_before = len(self.running)
        num_new_tokens = num_cached_tokens = num_new_seqs = 0
        done: list[GenRequest] = []
        for k, r in enumerate(batch):
            if not self.decoder.can_admit(r.dreq):  # no KV slot: back to the queue head
                self.waiting[:0] = batch[k:]
                break
            try:
                stats = self.decoder.prefill([r.dreq])
            except ValueError as e:  # the decoder refuses this request; others go on
                self.decoder.release(r.dreq)
                r.out.put(ErrorEvent(r.index, str(e), 400))
                continue
            num_new_seqs += stats.num_new_seqs
            num_new_tokens += stats.num_new_tokens
            num_cached_tokens += stats.num_cached_tokens
            done.append(r)
        if not done:
            return
        self.tokens_in_use = self.decoder.tokens_in_use()
        self.log.info(sglang_log.prefill_line(
            num_new_seqs=num_new_seqs, num_new_tokens=num_new_tokens,
            num_cached_tokens=num_cached_tokens, token_usage=self._usage(),
            num_running_reqs=num_running_before, num_queue_reqs=len(self.waiting),
            num_pending_tokens=0, graph=self.graph,
            input_throughput_tok_s=self.metrics.prefill_throughput(num_new_tokens)))
        for r in done:
            self.prompt_tokens_total += len(r.input_ids)
            if not self._emit(r):
                self.running.append(r)
        self.tokens_in_use = self.decoder.tokens_in_use()

    def _decode(self) -> None:
        batch = list(self.running)
        if self.adaptive is None:
            stats = self.decoder.decode_step([r.dreq for r in batch])
            self.spec_active_steps = self.args.speculative_num_steps or 0
        else:  # SGLang: steps from the batch size's slot, then its EMA sees this verify
            before = [r.dreq.spec_accepted_drafts for r in batch]
            self.spec_active_steps = self.adaptive.steps_for_batch(len(batch))
            stats = self.decoder.decode_step([r.dreq for r in batch],
                                             num_steps=self.spec_active_steps)
            self.adaptive.on_verify_complete(
                [r.dreq.spec_accepted_drafts - b for r, b in zip(batch, before)], len(batch))
        for r in batch:
            if self._emit(r):
                self.running.remove(r)
        self.tokens_in_use = self.decoder.tokens_in_use()
        if self.metrics.record_step(stats.batch_size, stats.num_accepted_drafts,
                                    stats.num_generated_tokens):
            w = self.metrics.close_window()
            self.log.info(sglang_log.decode_line(
                num_running_reqs=stats.batch_size, num_tokens=self.tokens_in_use,
                token_usage=self._usage(), accept_len=w.accept_len, accept_rate=w.accept_rate,
                graph=self.graph, gen_throughput_tok_s=w.gen_throughput_tok_s,
                num_queue_reqs=len(self.waiting),
                # SGLang prints whether the batch that closed the window replayed a graph
                graph_used=stats.cuda_graph))

    def _emit(self, r: GenRequest) -> bool:
        """Send r's new tokens, cutting at a stop; True (and KV released) when r is finished."""
        ids = r.dreq.output_ids
        limit = min(len(ids), r.max_new_tokens)
        finish: dict[str, Any] | None = None
        end = limit
        for j in range(r.emitted, limit):
            if ids[j] in r.stop_token_ids:
                finish, end = {"type": "stop", "matched": ids[j]}, j + 1
                break
            matched = self._matched_stop(r, ids, j)
            if matched is not None:
                finish, end = {"type": "stop", "matched": matched}, j + 1
                break
        if finish is None and (limit >= r.max_new_tokens or r.dreq.finished):
            finish = {"type": "length", "length": r.max_new_tokens}
        new = list(ids[r.emitted:end])
        r.emitted = end
        if finish is None:
            if new:
                r.out.put(TokenEvent(r.index, new, r.dreq.spec_verify_ct))
            return False
        self.decoder.release(r.dreq)
        self.generation_tokens_total += end
        if self.args.speculative_algorithm is not None:
            self.spec_verify_calls_total += r.dreq.spec_verify_ct
        r.out.put(FinishEvent(r.index, new, list(ids[:end]), finish, self._spec_meta(r)))
        return True

    def _matched_stop(self, r: GenRequest, ids: list[int], j: int) -> str | None:
        """The stop string that the text ends with once token j is added, if any."""
        if not r.stop:
            return None
        longest = max(len(s.encode()) for s in r.stop)
        tail = tokenizer.decode(ids[max(0, j + 1 - longest - 3): j + 1])
        for s in r.stop:
            if tail.endswith(s):
                return s
        return None

    def _spec_meta(self, r: GenRequest) -> dict[str, Any] | None:
        if self.args.speculative_algorithm is None:
            return None
        d = r.dreq
        return {
            "spec_verify_ct": d.spec_verify_ct,
            "spec_accepted_drafts": d.spec_accepted_drafts,
            "spec_accept_histogram": list(d.spec_accept_histogram),
        }

    def _usage(self) -> float:
        return self.tokens_in_use / self.max_total_num_tokens if self.max_total_num_tokens else 0.0

    def _fail_batch(self, kind: str, batch: list[GenRequest], e: Exception) -> None:
        """A step raised: its requests end with a 500 error and free their KV; the rest go on."""
        self.log.error(f"A {kind} step failed; "
                       f"its {len(batch)} request(s) end with an error: {e!r}\n"
                       f"{traceback.format_exc()}")
        for r in batch:
            for pool in (self.running, self.waiting):
                if r in pool:
                    pool.remove(r)
            if r.dreq is not None:
                try:
                    self.decoder.release(r.dreq)
                except Exception:  # the slot is lost, not the server
                    pass
            r.out.put(ErrorEvent(r.index, f"internal error in the scheduler: {e!r}", 500))
        self.tokens_in_use = self.decoder.tokens_in_use()

    def _abort_all(self, message: str) -> None:
        pending = list(self.running) + list(self.waiting)
        while True:
            try:
                kind, payload = self.inbox.get_nowait()
            except queue.Empty:
                break
            if kind == "req":
                pending.append(payload)
            elif kind == "flush":
                payload.put(False)
        self.running, self.waiting = [], []
        for r in pending:
            r.out.put(ErrorEvent(r.index, message))


def _env_true(name: str) -> bool:
    """SGLang 0.5.23's EnvBool (srt/environ.py; default False): true/1/yes/y, any case; another
    value warns and counts as the default, as there."""
    value = os.environ.get(name)
    if value is None or value.lower() in ("false", "0", "no", "n"):
        return False
    if value.lower() in ("true", "1", "yes", "y"):
        return True
    import warnings
    warnings.warn(f'Invalid value for {name}: "{value.lower()}" is not a valid boolean value, '
                  'using default "False"')
    return False


def _avail_mem_gb() -> float:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError):
        return 0.0


def _weights_bytes(model_dir: str) -> int:
    from pathlib import Path

    return sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))

