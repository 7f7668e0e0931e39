"""Sample a server's Prometheus `/metrics` page and its GPUs' power while a run's load runs.

`RunSampler(target, endpoint, gpus)` is started just before a load and stopped just after it; a
thread scrapes `/metrics` (prom.scrape) and reads NVML (energy.Gpus) at the start, every
`every_s` seconds, and at the end, so the first and last samples bound the load and a counter's
delta between them is the run's own. `stop()` returns `Sampled`: the `metric_samples` rows (minus
run_id) and the energy columns for the `runs` row. Measuring never writes the store; the writer
stores the rows (writer._write).

Which samples are kept: every counter and gauge the engine names in its own namespace (a name
with a `:`, as `sglang:spec_accept_length`, `sglang:spec_num_steps`,
`vllm:spec_decode_num_drafts_total`),
without histogram buckets and `_created` timestamps; NVML's as `nvml:gpu_power_w` and
`nvml:gpu_energy_j` (the counter, J since the driver loaded) with label `gpu`. A server without
`/metrics` (SGLang without `--enable-metrics`) gives no /metrics rows: `metrics_error` says why
after the first failed scrape, which is also the last one tried.
"""
from __future__ import annotations

import datetime as dt
import json
import threading
import time
from dataclasses import dataclass, field

from specwatch.run import energy, prom

EVERY_S = 1.0
_DROP_SUFFIXES = ("_bucket", "_created")


def kept(sample: prom.Sample) -> bool:
    """An engine metric worth a row (see the module docstring)."""
    return ":" in sample.name and not sample.name.endswith(_DROP_SUFFIXES)


def rows_of(samples: list[prom.Sample], endpoint: str, at: dt.datetime,
            t_s: float | None) -> list[dict]:
    """`metric_samples` rows (minus run_id) of one scrape."""
    return [{"endpoint": endpoint, "sampled_at": at, "t_s": t_s, "name": s.name,
             "labels": json.dumps(dict(s.labels), sort_keys=True), "value": s.value}
            for s in samples if kept(s)]


@dataclass
class Sampled:
    rows: list[dict] = field(default_factory=list)
    energy: dict = field(default_factory=dict)       # runs.gpu_energy_* columns
    metrics_error: str | None = None


class RunSampler:
    def __init__(self, target, endpoint: str, gpus=None, every_s: float = EVERY_S,
                 scrape_metrics: bool = True, measure_energy: bool = True):
        self.target, self.endpoint, self.every_s = target, endpoint, every_s
        self.scrape_metrics = scrape_metrics
        self.gpu = energy.Gpus.open(gpus) if measure_energy else None
        self.out = Sampled()
        self._stop = threading.Event()
        self._t0 = 0.0
        self._start_mj: list[int | None] = []
        self._power: list[tuple[float, list[float | None]]] = []
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        t = time.monotonic() - self._t0
        now = dt.datetime.now()
        if self.scrape_metrics and self.out.metrics_error is None:
            try:
                self.out.rows += rows_of(prom.scrape(self.target, timeout_s=5.0), self.endpoint,
                                         now, t)
            except prom.ScrapeError as exc:
                self.out.metrics_error = str(exc)
        if self.gpu is not None:
            watts, mj = self.gpu.power_w(), self.gpu.energy_mj()
            self._power.append((t, watts))
            for i, g in enumerate(self.gpu.ids):
                lab = json.dumps({"gpu": str(g)})
                if watts[i] is not None:
                    self.out.rows.append({"endpoint": "nvml", "sampled_at": now, "t_s": t,
                                          "name": "nvml:gpu_power_w", "labels": lab,
                                          "value": watts[i]})
                if mj[i] is not None:
                    self.out.rows.append({"endpoint": "nvml", "sampled_at": now, "t_s": t,
                                          "name": "nvml:gpu_energy_j", "labels": lab,
                                          "value": mj[i] / 1000.0})
            return mj
        return None

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def start(self) -> "RunSampler":
        self._t0 = time.monotonic()
        mj = self._sample()
        self._start_mj = mj or []
        self._thread = threading.Thread(target=self._loop, name="run-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Sampled:
        """Stop, take the last sample, and return everything (idempotent)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            end_mj = self._sample()
            if self.gpu is not None:
                self.out.energy = energy.RunEnergy(self.gpu.ids, self._start_mj, end_mj or [],
                                                   self._power).columns()
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None
        return self.out
