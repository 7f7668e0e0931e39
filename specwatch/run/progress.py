"""Sweep progress on stderr: on a terminal a `rich` progress display (a bar over all runs, and a
spinner or request bar per config that is running) with the event lines printed above it; when
not a terminal, plain lines only (one per event, nothing redrawn).

`sweep` calls these hooks from its worker threads; a test may subclass it to act at a given
moment (e.g. kill a server at the first request). Not here: anything that measures.
"""
from __future__ import annotations

import sys
import threading

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)
from rich.progress import Progress as RichProgress


class Progress:
    """Progress on stderr: a live display on a terminal, plain lines otherwise."""

    def __init__(self, stream=None, tty: bool | None = None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.lock = threading.RLock()   # re-entrant: the SIGINT handler prints too
        self.total_runs = 0
        self.runs_done = 0
        self._live: RichProgress | None = None
        self._runs_task = None
        self._tasks: dict[str, int] = {}   # config -> its task in the live display

    # ---------------------------------------------------------------------------- output

    def _line(self, text: str) -> None:
        with self.lock:
            if self._live is not None:
                self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()

    def _start_live(self) -> None:
        if not self.tty or self._live is not None:
            return
        console = Console(file=self.stream, force_terminal=True, highlight=False)
        self._live = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                  transient=True)
        self._live.start()
        self._runs_task = self._live.add_task("runs", total=self.total_runs or None)

    def _update(self, name: str, **kw) -> None:
        with self.lock:
            if self._live is not None and name in self._tasks:
                self._live.update(self._tasks[name], refresh=True, **kw)

    # ---------------------------------------------------------------------------- hooks

    def sweep_start(self, name: str, runs: int, configs: int, up_to_date: list[str]) -> None:
        self.total_runs = runs
        with self.lock:
            self._start_live()
        msg = f"sweep {name}: {configs} configs, {runs} runs to measure"
        if up_to_date:
            msg += f"; already measured (use --force to redo): {', '.join(up_to_date)}"
        self._line(msg)

    def config_start(self, name: str, runs: int) -> None:
        with self.lock:
            if self._live is not None:
                self._tasks[name] = self._live.add_task(f"{name} starting", total=None)
        self._line(f"{name}: launching ({runs} runs)")

    def note(self, name: str, text: str) -> None:
        self._line(f"{name}: {text}")

    def run_start(self, name: str, concurrency: int | str, repeat: int, n: int) -> None:
        level = f"c={concurrency}" if isinstance(concurrency, int) else concurrency  # or rps2
        self._update(name, description=f"{name} {level} r={repeat}", total=n,
                     completed=0)

    def request_done(self, name: str, ok: bool) -> None:
        with self.lock:
            if self._live is not None and name in self._tasks:
                self._live.advance(self._tasks[name])

    def _runs_advance(self, n: int) -> None:
        with self.lock:
            self.runs_done += n
            if self._live is not None and n:
                self._live.update(self._runs_task, completed=self.runs_done)

    def run_end(self, name: str, r) -> None:
        self._runs_advance(1)
        tput = f", {r.output_tok_s:.1f} tok/s" if r.output_tok_s else ""
        why = f" ({r.failure_reason})" if r.failure_reason else ""
        rate = getattr(r, "request_rate", None)
        level = f"c={r.concurrency}" if rate is None else f"rps={rate:g}"
        self._line(f"{name}: {level} r={r.repeat_idx} {r.status}: {r.requests_ok} ok, "
                   f"{r.requests_failed} failed{tput} in {r.load_s:.1f} s{why}")

    def config_end(self, name: str, out) -> None:
        with self.lock:
            task = self._tasks.pop(name, None)
            if self._live is not None and task is not None:
                self._live.remove_task(task)
        self._runs_advance(sum(1 for r in out.runs if r.load_s == 0))
        msg = f"{name}: {out.status}"
        if out.failure_reason:
            msg += f" ({out.failure_reason})"
        if out.stop_note:
            msg += f"; stop: {out.stop_note}"
        self._line(msg + f"; {out.total_s:.1f} s total, overhead {out.overhead_s:.2f} s")

    def sweep_end(self) -> None:
        with self.lock:
            if self._live is not None:
                self._live.stop()
                self._live = None
