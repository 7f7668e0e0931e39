"""SGLang servers never share a GPU by accident: without --gpus only the built-in engine's servers
are kept alive together (measured on the H200: a 5th SGLang server started beside 4 others died
with SGLang's "Not enough memory. Please try to increase --mem-fraction-static")."""
from pathlib import Path

import pytest

from specwatch.run import sweep, sweepfile

BASE = """
name = "s"
engine = "{engine}"
model = "{model}"
draft_model = "{draft}"
concurrency = [1]
{extra}
[workload]
prompts = "builtin:chat"
num_prompts = 2
[[config]]
name = "a"
speculative_num_steps = 2
speculative_eagle_topk = 1
"""


def _load(tmp_path: Path, engine: str, extra: str = "") -> sweepfile.Sweep:
    model, draft = (("builtin:target", "builtin:draft-eagle3") if engine == "builtin"
                    else ("/models/llama", "/models/eagle3"))
    f = tmp_path / "s.toml"
    f.write_text(BASE.format(engine=engine, model=model, draft=draft, extra=extra))
    return sweepfile.load(str(f))


@pytest.mark.parametrize("engine, gpus, extra, together", [
    ("builtin", None, "", True),
    ("sglang", None, "", False),          # one SGLang server at a time on the shared GPU
    ("builtin", (0, 1), "", False),       # --gpus: placement on disjoint GPU sets instead
    ("sglang", (0, 1), "", False),
    ("builtin", None, "port = 30000", False),
])
def test_servers_alive_together_only_for_the_builtin_engine(tmp_path, engine, gpus, extra,
                                                            together):
    assert sweep.shares_host(_load(tmp_path, engine, extra), gpus) is together
