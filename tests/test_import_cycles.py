"""No import circles: the module graph built from the ``import`` statements of trnsim/ (and conformance/) is acyclic.

Static analysis only (nothing is imported): an edge ``a -> b`` for each ``import b`` / ``from b import x`` /
``from . import b`` that runs when ``a`` is imported (module body, including ``if``/``try``/``with`` blocks and class
bodies, not function bodies nor ``if TYPE_CHECKING:``).  ``from pkg import name`` is an edge to ``pkg.name`` when
that is a module, else to ``pkg``.  A second check follows the deferred (function-level) imports too, for the
modules whose circles were broken in issue 15, so that those do not come back through a lazy import."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules(pkg_dir):
    mods = {}
    for d, dirs, files in os.walk(os.path.join(ROOT, pkg_dir)):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[:-len(".__init__")]
                mods[name] = path
    return mods


def _import_time_nodes(tree):
    todo = list(tree.body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            yield n
        elif isinstance(n, ast.If):
            todo += n.orelse if "TYPE_CHECKING" in ast.unparse(n.test) else n.body + n.orelse
        elif isinstance(n, ast.Try):
            todo += n.body + n.orelse + n.finalbody + [s for h in n.handlers for s in h.body]
        elif isinstance(n, (ast.With, ast.ClassDef)):
            todo += n.body


def import_graph(pkg_dir, deferred=False):
    """``{module: {modules it imports}}`` within ``pkg_dir``; ``deferred``: count imports in functions too."""
    mods = _modules(pkg_dir)
    graph = {}
    for name, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] if deferred \
            else _import_time_nodes(tree)
        edges = set()
        for n in nodes:
            if isinstance(n, ast.Import):
                edges.update(a.name for a in n.names if a.name in mods)
                continue
            base = n.module or ""
            if n.level:
                parts = pkg.split(".")[:len(pkg.split(".")) - (n.level - 1)]
                base = ".".join(parts + ([n.module] if n.module else []))
            for a in n.names:
                if f"{base}.{a.name}" in mods:
                    edges.add(f"{base}.{a.name}")
                elif base in mods:
                    edges.add(base)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _describe(graph, comps):
    lines = []
    for comp in comps:
        s = set(comp)
        lines.append("import circle: " + ", ".join(comp))
        lines += [f"    {m} imports {sorted(graph[m] & s)}" for m in comp]
    return "\n".join(lines)


def test_cycle_finder_finds_a_planted_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_relative_and_package_imports():
    g = import_graph("trnsim")
    assert "trnsim.backend.device_state" in g["trnsim.backend.memory"]           # from .device_state import STATE
    assert "trnsim.kernels.v1.tile" in g["trnsim.kernels.v1.language"]           # from .tile import (...)
    assert "trnsim.backend.kdtypes" in g["trnsim.backend.native_costs"]
    # a function-level import is not an import-time edge, but the deferred graph has it
    assert "trnsim.backend.tensor" not in g["trnsim.backend.compile.patching"]
    assert "trnsim.backend.tensor" in import_graph("trnsim", deferred=True)["trnsim.backend.compile.patching"]


@pytest.mark.parametrize("pkg", ["trnsim", "conformance"])
def test_no_import_cycle_at_module_level(pkg):
    g = import_graph(pkg)
    found = cycles(g)
    assert not found, _describe(g, found)


@pytest.mark.parametrize("group", [
    ("trnsim.backend.charging", "trnsim.backend.device_state", "trnsim.backend.memory", "trnsim.backend.tensor",
     "trnsim.backend.native_costs", "trnsim.backend.kdtypes", "trnsim.backend.device_module"),
    ("trnsim.kernels.v1.language", "trnsim.kernels.v1.tile") + tuple(
        f"trnsim.kernels.v1.lang_{m}" for m in ("dtypes", "alloc", "operands", "elementwise", "reduce", "matmul", "dma")),
    ("trnsim.backend.compile", "trnsim.backend.compile.backend", "trnsim.backend.compile.patching"),
])
def test_broken_circles_stay_broken_even_through_deferred_imports(group):
    g = import_graph("trnsim", deferred=True)
    sub = {m: g[m] & set(group) for m in group}
    found = cycles(sub)
    assert not found, _describe(sub, found)


# -- the direction of the layers (docs/ARCHITECTURE.md, "Layers") ---------------------------------------------------
# Each unit (a subpackage of trnsim, or a top-level module of it) imports only the units its row names.  The rows
# are docs/ARCHITECTURE.md's table; the test below checks the two list the same rows.

BASE = {"config", "fileio", "targets", "cliutil"}
MAY_IMPORT = {
    "config": set(),
    "fileio": set(),
    "targets": {"config"},
    "cliutil": {"config"},
    "memory": BASE,
    "isa": BASE | {"memory"},
    "machine": BASE | {"memory", "isa"},
    "profiler": BASE | {"machine"},
    "collectives": BASE,
    "kernels": BASE | {"memory", "isa", "machine", "profiler", "collectives"},
    "backend": BASE | {"memory", "isa", "machine", "profiler", "collectives", "kernels"},
    "cost": BASE | {"backend", "collectives"},
    "difftest": BASE,
    "profiling": BASE | {"memory", "isa", "machine", "profiler", "kernels"},
    "cli": None,                 # None: anything
    "pytest_plugin": None,
    "__main__": None,
    "trnsim": None,              # the package root: lazy names for the public API
}
# Imports allowed only inside functions (they run on use, not when the module is imported).
MAY_IMPORT_DEFERRED = {
    # the simulated device's paths only: on real hardware and on the CPU, difftest imports no simulator code
    "difftest": {"backend", "kernels"},
}
# Single edges outside the rows, each with its reason.  Keep this short.
EXCEPTIONS = {
    ("trnsim.backend.cost_cache", "trnsim"): "the cache fingerprint reads the package's __version__ and __file__",
    ("trnsim.cost.step", "trnsim"): "trnsim.profile_torch, the root's lazy name for backend.profiler.profile_torch",
}


def unit(module):
    parts = module.split(".")
    return "trnsim" if len(parts) == 1 else parts[1]


def layer_violations(graph, deferred):
    bad = []
    for a, targets in sorted(graph.items()):
        ua = unit(a)
        allowed = MAY_IMPORT[ua]
        if allowed is None:
            continue
        allowed = allowed | (MAY_IMPORT_DEFERRED.get(ua, set()) if deferred else set())
        for b in sorted(targets):
            ub = unit(b)
            if ub != ua and ub not in allowed and (a, b) not in EXCEPTIONS:
                bad.append(f"{a} imports {b}: {ua} may import {sorted(allowed) or 'nothing of trnsim'}")
    return bad


def test_every_unit_has_a_row():
    units = {unit(m) for m in import_graph("trnsim")}
    assert units == set(MAY_IMPORT), f"units without a row: {sorted(units - set(MAY_IMPORT))}; rows without a " \
                                     f"unit: {sorted(set(MAY_IMPORT) - units)}"


def test_layer_checker_finds_a_planted_upward_import():
    g = {"trnsim.memory.space": {"trnsim.machine.core"}, "trnsim.machine.core": {"trnsim.memory.space"},
         "trnsim.difftest.replaying": {"trnsim.backend"}}
    assert layer_violations(g, deferred=False) == [
        "trnsim.difftest.replaying imports trnsim.backend: difftest may import "
        "['cliutil', 'config', 'fileio', 'targets']",
        "trnsim.memory.space imports trnsim.machine.core: memory may import ['cliutil', 'config', 'fileio', 'targets']"]
    assert layer_violations(g, deferred=True) == [layer_violations(g, deferred=False)[1]]


@pytest.mark.parametrize("deferred", [False, True], ids=["module-level", "function-level"])
def test_imports_follow_the_layers(deferred):
    bad = layer_violations(import_graph("trnsim", deferred=deferred), deferred)
    assert not bad, "imports against docs/ARCHITECTURE.md's layers:\n" + "\n".join(bad)


def test_exceptions_are_still_needed():
    g = import_graph("trnsim", deferred=True)
    stale = [e for e in EXCEPTIONS if e[1] not in g.get(e[0], ())]
    assert not stale, f"exceptions no longer used (remove them): {stale}"


def test_trnsim_imports_nothing_of_the_repository_around_it():
    outside = ("conformance", "tests", "benchmarks", "tools", "examples")
    bad = []
    for name, path in _modules("trnsim").items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for n in ast.walk(tree):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else []
            bad += [f"{name} imports {x}" for x in names if x.split(".")[0] in outside]
    assert not bad, "\n".join(bad)


def test_the_architecture_document_lists_the_same_rows():
    """docs/ARCHITECTURE.md's layer table (``| `unit` | ... | may import |``) says what MAY_IMPORT says."""
    import re
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([\w_]+)`\s*\|.*\|\s*([^|]*)\|\s*$", line)
        if m:
            cell = m.group(2).strip()
            rows[m.group(1)] = None if cell == "anything" else \
                set() if cell == "nothing" else set(re.findall(r"`([\w_]+)`", cell.split(";")[0]))
    want = {u: (None if v is None else set(v)) for u, v in MAY_IMPORT.items()}
    assert rows == want
