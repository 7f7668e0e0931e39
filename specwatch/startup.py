"""What the `specwatch` command does once, before any of its commands runs.

pyarrow asks "is pandas installed?" the first time any array is built (`pa.array`, `pa.table`,
`DictionaryArray.from_arrays`: its lazy pandas shim), and answers by importing all of pandas:
0.14-0.21 s of every `specwatch ingest` (issue 28: 1.2-1.8x the `grep -c` of a 2M-line log),
though specwatch hands pyarrow no pandas object anywhere. `skip_pandas_probe` lets that first
question find no pandas. pyarrow's explicit pandas APIs (`to_pandas`, `from_pandas`) still import
it when called, and from then on pyarrow knows pandas as usual. Only for the `specwatch` process
(`cli.main`), never at import: a library user's process may hand pyarrow pandas objects.
"""
from __future__ import annotations

import atexit
import gc
import sys


class _NoPandas:
    """A meta-path finder that refuses pandas, for the duration of the probe."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas is not imported by the specwatch command")
        return None


def skip_pandas_probe() -> None:
    """Let pyarrow's one-time pandas probe answer 'not installed' (no-op if pandas is loaded)."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])   # the probe runs here, once per process
    finally:
        sys.meta_path.remove(finder)


def spare_the_collector() -> None:
    """Keep the cyclic garbage collector off objects that live until exit. What the command's
    modules made when it starts (~35K objects; ~43K at the exit of an ingest) lives until the
    process exits; each full collection walks all of it (a 27 ms one in a 2M-line ingest on 2
    CPUs), and Python's finalization collects several times while it clears modules (0.03-0.09 s
    CPU at the exit of an ingest). `gc.freeze` moves what is alive now out of every later
    collection, and again at exit: registered first, it runs after every other exit handler.
    Objects still go when their last reference does, and exit handlers run as before; only
    reference cycles alive at exit are left to the OS (it takes the whole heap back anyway)."""
    gc.freeze()
    atexit.register(gc.freeze)
