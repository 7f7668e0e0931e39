"""The floor plan holds: imports go one way between the wings, no import cycles, no module over
600 lines, and one module opens a model's config.json (issue 27).

    db        imports no other wing
    logs      imports db
    diagnose  imports db and logs (never run)
    run       may import db, logs and diagnose
    leaves    modelinfo, aux_layers and startup (model facts, aux-layer rules, the command's
              process set-up) import no wing and may be imported by any; cli, tables and dashboard_launch are entry points nobody imports
    engine    the built-in engine imports nothing of specwatch but the leaf aux_layers (the rule it
              captures aux layers by, shared with doctor)

Every import counts, also one inside a function: a lazy import is still a dependency.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "specwatch"
WINGS = ("db", "logs", "diagnose", "run")
LIB_LEAVES = {"modelinfo", "aux_layers", "startup"}
ENTRY_LEAVES = {"cli", "tables", "dashboard_launch", "report_html"}
MAY_IMPORT = {
    "db": {"db"},
    "logs": {"db", "logs"},
    "diagnose": {"db", "logs", "diagnose", "lib", "engine"},
    "run": {"db", "logs", "diagnose", "run", "lib", "engine"},
    "lib": {"lib", "engine"},
    "engine": {"engine", "lib"},   # the engine captures aux layers by aux_layers' rule
    "entry": {"db", "logs", "diagnose", "run", "lib", "engine", "entry"},
}
MAX_LINES = 600


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _part(module: str) -> str:
    """Which part of the house `module` (specwatch.X...) belongs to."""
    parts = module.split(".")
    if len(parts) == 1:
        return "entry"          # the package itself
    head = parts[1]
    if head in WINGS or head == "engine":
        return head
    if head in LIB_LEAVES:
        return "lib"
    if head in ENTRY_LEAVES:
        return "entry"
    raise AssertionError(f"{module}: a top-level module the floor plan does not name; put it in a "
                         f"wing, or add it to LIB_LEAVES / ENTRY_LEAVES in tests/test_layout.py")


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported specwatch module, at module level) for every import in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    top |= {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try)) and not _type_checking(s)
            for n in ast.walk(s)}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "specwatch":
            for a in node.names:   # `from specwatch.db import store` imports specwatch.db.store
                cand = f"{node.module}.{a.name}"
                names.append(cand if _exists(cand) else node.module)
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "specwatch"]
        out += [(node.lineno, n, id(node) in top) for n in names]
    return out


def _type_checking(node: ast.stmt) -> bool:
    """`if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): imports for annotations only, never run."""
    t = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING")
        or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"))


def _exists(module: str) -> bool:
    p = ROOT.joinpath(*module.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


SOURCES = sorted(p for p in PKG.rglob("*.py"))
PY_MODULES = [p for p in SOURCES if "engine" not in p.relative_to(PKG).parts[:1]]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way_between_wings(path):
    mine = _part(_module(path))
    bad = [f"{path.relative_to(ROOT)}:{line}: {mine} imports {dep} ({_part(dep)})"
           for line, dep, _ in _imports(path) if _part(dep) not in MAY_IMPORT[mine]
           and dep != "specwatch"]
    assert not bad, "\n".join(bad)


def test_no_import_cycle_between_modules():
    """Module-level imports form no cycle (a cycle makes import order decide what works)."""
    graph = {}
    for p in SOURCES:
        m = _module(p)
        graph[m] = {d for _, d, at_top in _imports(p) if at_top and d != m and _exists(d)}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("path", PY_MODULES + sorted((ROOT / "dashboards").glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_600_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines (at most {MAX_LINES}); split it by concern"


def test_only_modelinfo_opens_a_model_config_json():
    """One home for model-directory facts: outside the built-in engine, only specwatch/modelinfo.py
    names a model's config.json in code (docstrings and comments may mention it)."""
    offenders = []
    for p in PY_MODULES + sorted((ROOT / "dashboards").glob("*.py")):
        if p == PKG / "modelinfo.py":
            continue
        tree = ast.parse(p.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)}
        offenders += [f"{p.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str)
                      and n.value == "config.json" and id(n) not in docs]
    assert not offenders, f"config.json read outside modelinfo: {offenders}"


def test_the_direction_rules_catch_a_wrong_import(tmp_path):
    """The checker itself: a db module importing run, or logs importing diagnose, is refused."""
    assert "run" not in MAY_IMPORT["db"] and "diagnose" not in MAY_IMPORT["logs"]
    assert "run" not in MAY_IMPORT["diagnose"]
    src = tmp_path / "m.py"
    src.write_text("from specwatch.run import sweep\n\ndef f():\n    import specwatch.logs.parse\n")
    got = {(d, top) for _, d, top in _imports(src)}
    assert got == {("specwatch.run.sweep", True), ("specwatch.logs.parse", False)}
