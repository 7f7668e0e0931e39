"""Sweep progress on stderr: bars redrawn in place on a terminal, plain lines otherwise.

`sweep` calls these hooks from its worker threads; a test may subclass it to act at a given
moment (e.g. kill a server at the first request). Not here: anything that measures.
"""
from __future__ import annotations

import sys
import threading


class Progress:
    """Progress on stderr: bars redrawn in place on a terminal, plain lines otherwise."""

    def __init__(self, stream=None, tty: bool | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.lock = threading.RLock()   # re-entrant: the SIGINT handler prints too
        self.total_runs = 0
        self.runs_done = 0
        self.current: dict[str, list] = {}     # config -> [requests done, total, label]

    def _line(self, text: str) -> None:
        with self.lock:
            if self.tty:
                self.stream.write("\r\033[K" + text + "\n")
                self._draw()
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    @staticmethod
    def _bar(done: int, total: int, width: int = 20) -> str:
        n = int(width * done / total) if total else width
        return "[" + "#" * n + "." * (width - n) + f"] {done}/{total}"

    def _draw(self) -> None:
        parts = ["runs " + self._bar(self.runs_done, self.total_runs)]
        for name, (d, t, label) in self.current.items():
            parts.append(f"{name} {label}" + (" " + self._bar(d, t, 10) if t else ""))
        self.stream.write("\r\033[K" + "  ".join(parts)[:200])

    def _redraw(self) -> None:
        if self.tty:
            with self.lock:
                self._draw()
                self.stream.flush()

    def sweep_start(self, name: str, runs: int, configs: int, up_to_date: list[str]) -> None:
        self.total_runs = runs
        msg = f"sweep {name}: {configs} configs, {runs} runs to measure"
        if up_to_date:
            msg += f"; already measured (use --force to redo): {', '.join(up_to_date)}"
        self._line(msg)

    def config_start(self, name: str, runs: int) -> None:
        self.current[name] = [0, 0, "starting"]
        self._line(f"{name}: launching ({runs} runs)")

    def note(self, name: str, text: str) -> None:
        self._line(f"{name}: {text}")

    def run_start(self, name: str, concurrency: int, repeat: int, n: int) -> None:
        self.current[name] = [0, n, f"c={concurrency} r={repeat}"]
        self._redraw()

    def request_done(self, name: str, ok: bool) -> None:
        with self.lock:
            if name in self.current:
                self.current[name][0] += 1
        if self.tty:
            self._redraw()

    def run_end(self, name: str, r) -> None:
        self.runs_done += 1
        tput = f", {r.output_tok_s:.1f} tok/s" if r.output_tok_s else ""
        why = f" ({r.failure_reason})" if r.failure_reason else ""
        self._line(f"{name}: c={r.concurrency} r={r.repeat_idx} {r.status}: {r.requests_ok} ok, "
                   f"{r.requests_failed} failed{tput} in {r.load_s:.1f} s{why}")

    def config_end(self, name: str, out) -> None:
        self.current.pop(name, None)
        self.runs_done += sum(1 for r in out.runs if r.load_s == 0)
        msg = f"{name}: {out.status}"
        if out.failure_reason:
            msg += f" ({out.failure_reason})"
        if out.stop_note:
            msg += f"; stop: {out.stop_note}"
        self._line(msg + f"; {out.total_s:.1f} s total, overhead {out.overhead_s:.2f} s")

    def sweep_end(self) -> None:
        if self.tty:
            with self.lock:
                self.stream.write("\r\033[K")
                self.stream.flush()
