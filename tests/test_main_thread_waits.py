"""A stop signal the kernel delivers to a worker thread is still handled at once.

Python runs signal handlers only in the main thread, and only when it executes bytecode; a main
thread blocked on one long `Future.result()` runs them when that wait ends. A sweep hit this on a
loaded box: SIGTERM arrived as a run began and its handler ran 17 s later, after the whole run had
been measured and stored as `ok`. `procs.wait_result` waits in short slices; the sweep driver and
the load generator wait through it. `signal.pthread_kill` sends the signal to one chosen thread, so
the test does not depend on which thread the kernel would pick.
"""
from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from specwatch.run import procs

SLOW_S = 2.0


def _handled_after(wait) -> float:
    """Seconds from a SIGUSR1 sent to a worker thread until the main thread's handler ran,
    while the main thread waits (with `wait`) on a future that takes SLOW_S."""
    handled = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: handled.append(time.monotonic()))
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            def slow():
                time.sleep(0.3)
                sent.append(time.monotonic())
                signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # to this worker only
                time.sleep(SLOW_S)
                return "done"
            sent: list[float] = []
            assert wait(pool.submit(slow)) == "done"
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert handled and sent
    return handled[0] - sent[0]


def test_wait_result_runs_the_handler_within_a_slice():
    assert _handled_after(procs.wait_result) < 1.0


def test_a_plain_result_wait_defers_it_to_the_end():
    """The control: without the slices the handler waits for the future (what the sweep did)."""
    delay = _handled_after(lambda fut: fut.result())
    if delay < 1.0:
        pytest.fail(f"handler ran {delay:.2f} s after the signal during a plain result(): this "
                    "Python interrupts the main thread's lock wait for a signal delivered to "
                    "another thread, so the control does not show the problem here")
    assert delay >= SLOW_S - 0.5


def test_wait_result_reraises_the_worker_exception():
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            procs.wait_result(fut)
