"""Every third-party module the code, the tests, the benchmarks and the dashboard import is declared
in pyproject.toml (the dependencies or an extra), so a fresh install has it: scipy was once used by
a test and declared nowhere, which only a machine that happened to hold it passed.

Imports are read with `ast` (every `import` and `from ... import`, also inside functions); a module
is third-party when it is neither the standard library nor a file or package of this repo. Its
distribution comes from the installed metadata (`yaml` is PyYAML); one that is not installed here
must be a declared name itself. tests/contract*/ run in the side envs (real sglang, real vLLM), so
what they import beyond this environment is theirs.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from conftest import ROOT

DIRS = ["specwatch", "kernels", "tests", "benchmarks", "dashboards", "scripts"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values()
                                      for r in extra]
    return {norm(re.match(r"[A-Za-z0-9_.\-]+", r).group(0)) for r in reqs}


def local_names() -> set[str]:
    names = {"specwatch", "specwatch_kernels", *DIRS}
    for d in DIRS:
        for p in (ROOT / d).rglob("*.py"):
            names.add(p.stem)
            names.update(q.name for q in p.parents if (q / "__init__.py").exists())
    # benchmarks/bench_engine_cpu_ab.py imports an older commit's tree under these names;
    # benchmarks/real_sglang_h200.py imports expected_histogram from --tools (shared/real-sglang-h200)
    return names | {"specwatch_old", "kernels_old", "specwatch_kernels_old", "expected_histogram"}


def imports() -> dict[str, set[str]]:
    """top-level module -> files importing it"""
    found: dict[str, set[str]] = {}
    for d in DIRS:
        for p in (ROOT / d).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text(), str(p))):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for m in mods:
                    found.setdefault(m.split(".")[0], set()).add(str(p.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared():
    want, local, dists = declared(), local_names(), packages_distributions()
    missing = []
    for mod, files in sorted(imports().items()):
        if mod in sys.stdlib_module_names or mod in local or mod == "__future__":
            continue
        if all(f.startswith("tests/contract") for f in files):
            continue
        providers = {norm(d) for d in dists.get(mod, [])} or {norm(mod)}
        if not providers & want:
            missing.append(f"{mod} (from {', '.join(sorted(providers))}): {', '.join(sorted(files))}")
    assert not missing, ("imported but declared nowhere in pyproject.toml; add each to the "
                         "dependencies or the extra that needs it:\n" + "\n".join(missing))


def test_the_check_sees_what_it_checks():
    """Guards against a check that passes by reading nothing."""
    found = imports()
    assert {"duckdb", "torch", "triton", "streamlit", "scipy", "transformers"} <= set(found)
    assert "scipy" not in local_names() and "duckdb" in {norm(d) for d in declared()}
