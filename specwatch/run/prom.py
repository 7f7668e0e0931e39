"""Read a Prometheus `/metrics` page (vLLM's, or any server's): scrape it, parse it, sum counters.

`scrape(target)` GETs `/metrics` and returns its samples; `parse(text)` is the pure half (the
text exposition format, read with prometheus-client's own parser, the library vLLM exports with).
A sample is (name, labels, value) with the name as printed (`vllm:spec_decode_num_drafts_total`).

vLLM's spec-decode counters (vLLM 0.32 `vllm/v1/spec_decode/metrics.py`, `SpecDecodingProm`;
labels `model_name`, `engine`, and `position` for the per-position one; each has a `_created`
twin, and none exists without speculation):

  vllm:spec_decode_num_drafts_total                      verify steps with a draft (drafts)
  vllm:spec_decode_num_draft_tokens_total                draft tokens proposed
  vllm:spec_decode_num_accepted_tokens_total             draft tokens accepted
  vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}   accepted at draft position i

`spec_counters(samples)` sums them over engines (DP ranks) into `SpecCounters`;
`SpecCounters.minus(before)` is a run's own share when the page is scraped before and after it.
The definitions specwatch derives from them (the same as vLLM's `SpecDecoding metrics:` log line
and its Prometheus docstring):

  accept_len  = 1 + accepted_tokens / drafts    (tokens per verify step, the bonus token included)
  accept_rate = accepted_tokens / draft_tokens

Not here: sampling `/metrics` over time into a table, storing (writer), the log's spec lines
(logs/parse).
"""
from __future__ import annotations

import http.client
from dataclasses import dataclass, field

from specwatch.run import client

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
SPEC_COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POS)


class ScrapeError(RuntimeError):
    """The page could not be fetched or parsed; the message says where and why."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def parse(text: str) -> list[Sample]:
    """Every sample of a text-format page, in page order. Raises ScrapeError on a malformed page."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
                for fam in text_string_to_metric_families(text) for s in fam.samples]
    except ValueError as exc:
        raise ScrapeError(f"/metrics: not a Prometheus text page: {exc}") from None


def scrape(target, timeout_s: float = 10.0) -> list[Sample]:
    """GET /metrics of `target` (a port on 127.0.0.1 or (host, port)) and parse it."""
    try:
        status, body = client.get(target, "/metrics", timeout_s)
    except (OSError, http.client.HTTPException) as exc:
        raise ScrapeError(f"GET /metrics: {type(exc).__name__}: {exc}") from None
    if status != 200:
        raise ScrapeError(f"GET /metrics: HTTP {status}: {body[:200].decode(errors='replace')}")
    return parse(body.decode(errors="replace"))


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's spec-decode counters summed over engines (see the module docstring)."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...] = field(default=())

    def minus(self, before: "SpecCounters | None") -> "SpecCounters":
        """What was counted since `before` (None: since the server started)."""
        if before is None:
            return self
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        pad = lambda t: tuple(t) + (0,) * (n - len(t))
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted_tokens - before.accepted_tokens,
                            tuple(a - b for a, b in zip(pad(self.accepted_per_pos),
                                                        pad(before.accepted_per_pos))))

    @property
    def accept_len(self) -> float | None:
        """1 + accepted_tokens / drafts; None without drafts."""
        return 1 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def accept_rate(self) -> float | None:
        """accepted_tokens / draft_tokens; None without draft tokens."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None


def spec_counters(samples: list[Sample]) -> SpecCounters | None:
    """The spec-decode counters of a page, summed over engines; None when the page has none
    (the server runs without speculation)."""
    sums = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    per_pos: dict[int, float] = {}
    seen = False
    for s in samples:
        if s.name in sums:
            sums[s.name] += s.value
            seen = True
        elif s.name == ACCEPTED_PER_POS:
            pos = int(dict(s.labels).get("position", 0))
            per_pos[pos] = per_pos.get(pos, 0.0) + s.value
    if not seen:
        return None
    return SpecCounters(int(sums[DRAFTS]), int(sums[DRAFT_TOKENS]), int(sums[ACCEPTED]),
                        tuple(int(per_pos.get(i, 0)) for i in range(max(per_pos, default=-1) + 1)))
