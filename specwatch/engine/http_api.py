"""Request validation and response shaping for the built-in engine's HTTP API.

Turns SGLang `/generate` and OpenAI `/v1/completions`, `/v1/chat/completions` bodies into token
ids + `Sampling` (unknown fields and bad values raise `BadRequest`, a 4xx), and gathers a call's
scheduler events (`Call`) into SGLang's `text` / `output_ids` / `meta_info` and OpenAI's text,
deltas and usage. Stop strings are trimmed here; a streamed text never shows part of a stop.

Not here: sockets and routing (server.py), scheduling (scheduler.py).
"""

from __future__ import annotations

import json
import math
import queue
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Iterator

from specwatch.engine import tokenizer


class BadRequest(Exception):
    """A request the server refuses with a 4xx; the message says which field and why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# ----------------------------------------------------------------------------- request parsing


@dataclass
class Sampling:
    max_new_tokens: int | None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: set[int] = field(default_factory=set)
    no_stop_trim: bool = False


def check_type(where: str, value: Any, kinds: tuple, what: str) -> None:
    # bool is an int in Python; JSON true is never a valid number here
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise BadRequest(f"{where}: expected {what}, got {json.dumps(value)}")


def _stop_list(where: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise BadRequest(f"{where}: expected a string or a list of strings")


# SGLang SamplingParams fields the engine accepts, with the only value it supports where it
# cannot honour others (None = any value, ignored or honoured below).
_SAMPLING_FIXED: dict[str, Any] = {
    "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "n": 1, "json_schema": None, "regex": None, "ebnf": None, "structural_tag": None,
    "custom_params": None, "logit_bias": None,
}
_SAMPLING_FREE = {"ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                  "min_new_tokens", "stream_interval"}
# SGLang 0.5.23's /generate refuses `seed` (the field is `sampling_seed`; OpenAI's top-level `seed`
# maps to it): tests/contract/test_request_fields_contract.py checks this set against the real one.
_SAMPLING_ALL = {"max_new_tokens", "temperature", "top_p", "top_k", "stop", "stop_token_ids",
                 "no_stop_trim", "sampling_seed"} | set(_SAMPLING_FIXED) | _SAMPLING_FREE


SAMPLING_EPS = 1e-6  # sglang/srt/sampling/sampling_params.py _SAMPLING_EPS


def parse_sampling(sp: Any, where: str = "sampling_params") -> Sampling:
    """SGLang's SamplingParams(**sp) + verify(): unknown keys and bad values are 400s."""
    if sp is None:
        sp = {}
    check_type(where, sp, (dict,), "an object")
    unknown = sorted(set(sp) - _SAMPLING_ALL)
    if unknown:
        raise BadRequest(f"{where}: unknown field `{unknown[0]}`, expected one of "
                         + ", ".join(f"`{k}`" for k in sorted(_SAMPLING_ALL)))
    for key, only in _SAMPLING_FIXED.items():
        if key in sp and sp[key] is not None and sp[key] != only:
            raise BadRequest(f"{where}.{key}={json.dumps(sp[key])} is not supported by the "
                             f"built-in engine (only {json.dumps(only)})")
    out = Sampling(max_new_tokens=128)
    if sp.get("max_new_tokens") is not None:
        check_type(f"{where}.max_new_tokens", sp["max_new_tokens"], (int,), "an integer")
        if sp["max_new_tokens"] < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {sp['max_new_tokens']}.")
        out.max_new_tokens = sp["max_new_tokens"]
    elif "max_new_tokens" in sp:
        out.max_new_tokens = None  # until the context is full
    if sp.get("temperature") is not None:
        check_type(f"{where}.temperature", sp["temperature"], (int, float), "a number")
        t = float(sp["temperature"])
        # SGLang 0.5.23 SamplingParams.verify (JSON bodies may carry NaN and Infinity) ...
        if not math.isfinite(t) or t < 0.0:
            raise BadRequest(f"temperature must be a non-negative finite number, got {t}.")
        # ... and __post_init__: 0 <= temperature < _SAMPLING_EPS (1e-6) is greedy (top_k = 1).
        out.temperature = 0.0 if t < SAMPLING_EPS else t
    if sp.get("top_p") is not None:
        check_type(f"{where}.top_p", sp["top_p"], (int, float), "a number")
        if not 0 < sp["top_p"] <= 1:
            raise BadRequest(f"top_p must be in (0, 1], got {sp['top_p']}.")
        out.top_p = float(sp["top_p"])
    if sp.get("top_k") is not None:
        check_type(f"{where}.top_k", sp["top_k"], (int,), "an integer")
        if sp["top_k"] < -1 or sp["top_k"] == 0:  # SGLang 0.5.23 SamplingParams.verify
            raise BadRequest(f"top_k must be -1 (disable) or at least 1, got {sp['top_k']}.")
        if sp["top_k"] == 1:
            out.temperature = 0.0  # top_k=1 is greedy
        elif sp["top_k"] != -1:
            raise BadRequest(f"{where}.top_k={sp['top_k']} is not supported by the built-in "
                             "engine (only -1 = off, or 1 = greedy)")
    if sp.get("sampling_seed") is not None:
        check_type(f"{where}.sampling_seed", sp["sampling_seed"], (int,), "an integer")
        out.seed = sp["sampling_seed"]
    out.stop = _stop_list(f"{where}.stop", sp.get("stop"))
    ids = sp.get("stop_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                               for t in ids):
            raise BadRequest(f"{where}.stop_token_ids: expected a list of integers")
        out.stop_token_ids = set(ids)
    for key in ("min_new_tokens", "stream_interval"):
        if sp.get(key) is not None:
            check_type(f"{where}.{key}", sp[key], (int,), "an integer")
    mn = sp.get("min_new_tokens")
    if mn is not None and mn < 0:
        raise BadRequest(f"min_new_tokens must be in [0, max_new_tokens], got {mn}.")
    if mn is not None and out.max_new_tokens is not None and mn > out.max_new_tokens:
        raise BadRequest(f"min_new_tokens must be in [0, max_new_tokens({out.max_new_tokens})], "
                         f"got {mn}.")
    for key in ("no_stop_trim", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens"):
        if sp.get(key) is not None:
            check_type(f"{where}.{key}", sp[key], (bool,), "true or false")
    out.no_stop_trim = bool(sp.get("no_stop_trim", False))
    return out


def prompt_ids(where: str, value: Any) -> list[list[int]] | None:
    """A prompt as token ids: text, ids, or a list of either (a batch). None if absent."""
    if value is None:
        return None
    if isinstance(value, str):
        return [tokenizer.encode(value)]
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return [tokenizer.encode(x) for x in value]
    if isinstance(value, list) and value and all(isinstance(x, int) and not isinstance(x, bool)
                                                 for x in value):
        return [value]
    if isinstance(value, list) and value and all(isinstance(x, list) for x in value):
        out = []
        for x in value:
            if not x or not all(isinstance(t, int) and not isinstance(t, bool) for t in x):
                raise BadRequest(f"{where}: expected lists of integer token ids")
            out.append(x)
        return out
    raise BadRequest(f"{where}: expected a string, a list of strings, a list of token ids or a "
                     f"list of lists of token ids")


GENERATE_FIELDS = {"text", "input_ids", "sampling_params", "stream", "rid", "return_logprob",
                    "logprob_start_len", "top_logprobs_num", "token_ids_logprob",
                    "return_text_in_logprobs", "log_metrics", "lora_path", "image_data",
                    "audio_data", "video_data", "modalities", "custom_logit_processor",
                    "data_parallel_rank", "session_params", "return_hidden_states",
                    "bootstrap_host", "bootstrap_port", "bootstrap_room", "priority"}
GENERATE_UNSUPPORTED = ("return_logprob", "lora_path", "image_data", "audio_data", "video_data",
                         "custom_logit_processor", "session_params", "return_hidden_states")

COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "stop",
                      "stream", "stream_options", "n", "seed", "ignore_eos", "echo", "logprobs",
                      "best_of", "user", "presence_penalty", "frequency_penalty",
                      "repetition_penalty", "min_p", "stop_token_ids", "no_stop_trim",
                      "skip_special_tokens", "min_tokens", "suffix", "logit_bias", "rid"}
CHAT_FIELDS = (COMPLETION_FIELDS - {"prompt", "echo", "best_of", "suffix"}) | {
    "messages", "max_completion_tokens", "tools", "tool_choice", "response_format",
    "top_logprobs", "parallel_tool_calls", "chat_template_kwargs", "separate_reasoning"}


def openai_sampling(body: dict, max_tokens: Any, default_max: int | None) -> Sampling:
    for key, only in (("n", 1), ("best_of", 1), ("echo", False), ("logprobs", None),
                      ("suffix", None), ("tools", None), ("response_format", None)):
        if body.get(key) not in (None, only):
            raise BadRequest(f"{key}={json.dumps(body[key])} is not supported by the built-in "
                             f"engine (only {json.dumps(only)})")
    if body.get("logprobs") not in (None, False):
        raise BadRequest("logprobs is not supported by the built-in engine")
    sp = {k: body[k] for k in ("temperature", "top_p", "top_k", "stop", "ignore_eos",
                               "presence_penalty", "frequency_penalty", "repetition_penalty",
                               "min_p", "stop_token_ids", "no_stop_trim", "skip_special_tokens")
          if k in body}
    if "seed" in body:  # OpenAI's seed is SGLang's sampling_seed
        sp["sampling_seed"] = body["seed"]
    sp["max_new_tokens"] = default_max if max_tokens is None else max_tokens
    if max_tokens is not None:
        check_type("max_tokens", max_tokens, (int,), "an integer")
    return parse_sampling(sp, where="request")


def chat_prompt(messages: Any) -> str:
    """The toy byte model has no chat template: `role: content` lines, then `assistant:`."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: expected a non-empty list of {role, content} objects")
    lines = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}]: expected an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" \
                        or not isinstance(part.get("text"), str):
                    raise BadRequest(f"messages[{i}].content: only text parts are supported")
                parts.append(part["text"])
            content = "".join(parts)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content: expected a string or a list of text parts")
        lines.append(f"{m['role']}: {content}")
    return "\n".join(lines) + "\nassistant:"


class Call:
    """The requests of one HTTP call: gathers their events, builds text and meta_info."""

    def __init__(self, engine: Any, reqs: list, out: queue.Queue, sp: Sampling) -> None:
        self.engine, self.reqs, self.out, self.sp = engine, reqs, out, sp
        self.t0 = time.perf_counter()
        n = len(reqs)
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.decoders = [tokenizer.IncrementalDecoder() for _ in range(n)]
        self.raw_text = [""] * n
        self.sent_text = [""] * n  # what visible_text returned last (OpenAI deltas)
        self.verify_ct = [0] * n
        self.finish: list[Any] = [None] * n  # FinishEvent once done

    def abort(self) -> None:
        for r in self.reqs:
            r.aborted = True

    def events(self) -> Iterator[int]:
        """Yield the index of each request that changed, until all are finished."""
        from specwatch.engine.scheduler import ErrorEvent, FinishEvent

        pending = len(self.reqs)
        while pending:
            ev = self.out.get()
            if isinstance(ev, ErrorEvent):
                if ev.status in (400, 500):
                    raise BadRequest(ev.message, ev.status)
                raise BadRequest(f"request aborted: {ev.message}", HTTPStatus.SERVICE_UNAVAILABLE)
            i = ev.index
            self.ids[i].extend(ev.new_ids)
            self.raw_text[i] += self.decoders[i].push(ev.new_ids)
            if isinstance(ev, FinishEvent):
                self.finish[i] = ev
                self.ids[i] = list(ev.output_ids)
                if ev.spec:
                    self.verify_ct[i] = ev.spec["spec_verify_ct"]
                pending -= 1
            else:
                self.verify_ct[i] = ev.spec_verify_ct
            yield i

    def wait(self) -> None:
        for _ in self.events():
            pass

    def text(self, i: int) -> str:
        """Text so far; while running, the tail that could start a stop string is held back."""
        fin = self.finish[i]
        if fin is not None:
            ids = self.ids[i]
            matched = fin.finish_reason.get("matched")
            if isinstance(matched, int) and not self.sp.no_stop_trim:
                ids = ids[:-1]
            text = tokenizer.decode(ids)
            if isinstance(matched, str) and not self.sp.no_stop_trim and text.endswith(matched):
                text = text[: len(text) - len(matched)]
            return text
        text = self.raw_text[i]
        hold = 0
        for s in self.sp.stop:
            for k in range(min(len(s) - 1, len(text)), hold, -1):
                if text.endswith(s[:k]):
                    hold = k
                    break
        return text[: len(text) - hold] if hold else text

    def delta(self, i: int) -> str:
        text = self.text(i)
        d = text[len(self.sent_text[i]):] if text.startswith(self.sent_text[i]) else ""
        self.sent_text[i] = text
        return d

    def meta_info(self, i: int) -> dict[str, Any]:
        r, fin = self.reqs[i], self.finish[i]
        completion = len(self.ids[i])
        meta: dict[str, Any] = {
            "id": r.rid, "finish_reason": fin.finish_reason if fin else None,
            "prompt_tokens": len(r.input_ids), "weight_version": "default",
            "total_retractions": 0, "completion_tokens": completion, "cached_tokens": 0,
        }
        if self.engine.spec:
            ct = self.verify_ct[i]
            meta["spec_verify_ct"] = ct
            if fin is not None and fin.spec and ct > 0:
                drafts = fin.spec["spec_accepted_drafts"]
                proposed = ct * (self.engine.args.speculative_num_draft_tokens - 1)
                # SGLang 0.5.23 TokenizerManager._calculate_spec_decoding_metrics' names; its
                # histogram grows to the largest count seen (Req.update_spec_correct_drafts_histogram)
                hist = list(fin.spec["spec_accept_histogram"])
                while len(hist) > 1 and hist[-1] == 0:
                    hist.pop()
                meta.update({
                    "spec_accept_length": completion / ct,  # SGLang 0.5.4+: incl. prefill token
                    "spec_accept_rate": drafts / proposed if proposed else 0.0,
                    "spec_num_correct_drafts": drafts, "spec_num_proposed_drafts": proposed,
                    "spec_correct_drafts_histogram": hist,
                })
        meta["e2e_latency"] = time.perf_counter() - self.t0
        return meta

    def openai_finish(self, i: int) -> tuple[str | None, Any]:
        fin = self.finish[i]
        if fin is None:
            return None, None
        reason = fin.finish_reason
        return reason["type"], reason.get("matched")

    def usage(self) -> dict[str, int]:
        prompt = sum(len(r.input_ids) for r in self.reqs)
        completion = sum(len(x) for x in self.ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}
