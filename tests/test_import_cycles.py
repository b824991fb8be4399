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
    ("trnsim.kernels.v1.language", "trnsim.kernels.v1.tile"),
    ("trnsim.backend.compile", "trnsim.backend.compile.backend", "trnsim.backend.compile.patching"),
])
def test_broken_circles_stay_broken_even_through_deferred_imports(group):
    g = import_graph("trnsim", deferred=True)
    sub = {m: g[m] & set(group) for m in group}
    found = cycles(sub)
    assert not found, _describe(sub, found)
