"""Sweep progress: plain lines when not a terminal, a rich live display (bar, spinner) on one."""
from __future__ import annotations

import io
import types

from specwatch.run.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drive(p: Progress) -> None:
    p.sweep_start("demo", 2, 1, ["old"])
    p.config_start("eagle3", 2)
    p.note("eagle3", "ready in 1.0 s")
    p.run_start("eagle3", 4, 0, 3)
    for _ in range(3):
        p.request_done("eagle3", True)
    run = types.SimpleNamespace(concurrency=4, repeat_idx=0, status="ok", requests_ok=3,
                                requests_failed=0, output_tok_s=123.4, load_s=0.5,
                                failure_reason=None)
    p.run_end("eagle3", run)
    failed = types.SimpleNamespace(concurrency=4, repeat_idx=1, status="failed", requests_ok=0,
                                   requests_failed=0, output_tok_s=None, load_s=0.0,
                                   failure_reason="server died")
    p.config_end("eagle3", types.SimpleNamespace(
        runs=[run, failed], status="failed", failure_reason="server died", stop_note=None,
        total_s=2.0, overhead_s=0.1))
    p.sweep_end()


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = Progress(stream=out)
    _drive(p)
    assert out.getvalue().splitlines() == [
        "sweep demo: 1 configs, 2 runs to measure; already measured (use --force to redo): old",
        "eagle3: launching (2 runs)",
        "eagle3: ready in 1.0 s",
        "eagle3: c=4 r=0 ok: 3 ok, 0 failed, 123.4 tok/s in 0.5 s",
        "eagle3: failed (server died); 2.0 s total, overhead 0.10 s",
    ]
    assert "\x1b" not in out.getvalue() and p.runs_done == 2


def test_live_bar_and_spinner_on_a_terminal():
    out = _Terminal()
    p = Progress(stream=out)
    _drive(p)
    text = out.getvalue()
    assert "\x1b[" in text                      # redrawn in place
    assert "eagle3 c=4 r=0" in text             # the config's request bar
    assert "2/2" in text or "1/2" in text       # the runs bar counts runs
    assert "eagle3: c=4 r=0 ok: 3 ok" in text   # event lines still printed
    assert p._live is None                      # stopped at sweep end
