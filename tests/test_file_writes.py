"""File-write audit: every file trnsim (and the conformance suite) writes goes through ``trnsim/fileio.py``'s
atomic helpers, so a reader never sees half a file and processes sharing a directory never corrupt each other.

Static analysis of the source (nothing is run): a call that writes a file -- ``open``/``os.fdopen``/``Path.open``
with a writing mode, ``write_text``/``write_bytes``, ``json.dump``/``pickle.dump``/``np.save*``/``torch.save``/
``savefig``/``tofile`` onto something that is not the file object of a ``with atomic_write(...)`` block,
``shutil.copy*``, and hand-rolled atomics (``tempfile.mkstemp``, ``os.replace``/``os.rename``) -- is an offender,
unless ``ALLOWED`` lists it with the reason."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("trnsim", "conformance")

# (path, enclosing function, call) -> why it is not a file write that needs the atomic helpers
ALLOWED = {
    ("trnsim/fileio.py", "atomic_write", "tempfile.mkstemp"): "the atomic writer itself",
    ("trnsim/fileio.py", "atomic_write", "os.fdopen"): "the atomic writer itself",
    ("trnsim/fileio.py", "atomic_write", "os.replace"): "the atomic writer itself",
    ("trnsim/cli.py", "main", "os.open"): "opens /dev/null to silence stdout after a closed pipe; writes no file",
    ("trnsim/cost/forked.py", "send", "os.fdopen"): "the write end of a pipe to the helper process; no file",
    ("trnsim/cost/forked.py", "_helper_main", "os.open"): "opens /dev/null to silence the helper; writes no file",
    ("trnsim/cost/forked.py", "_helper_main", "os.fdopen"): "the write end of a pipe back to the parent; no file",
    ("trnsim/difftest/bundle.py", "write_bundle", "np.savez"): "into an in-memory BytesIO; the bytes are then "
                                                               "written with atomic_write",
}

_DUMPERS = {"json.dump", "pickle.dump", "np.save", "np.savez", "np.savez_compressed", "np.savetxt", "numpy.save",
            "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "torch.save", "marshal.dump"}
_ALWAYS = {"tempfile.mkstemp", "tempfile.NamedTemporaryFile", "os.replace", "os.rename", "shutil.copy",
           "shutil.copy2", "shutil.copyfile", "shutil.move", "os.open"}
_ATTR_WRITERS = {"write_text", "write_bytes", "savefig", "tofile", "to_csv", "to_parquet"}


def _name(f):
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        base = _name(f.value)
        return f"{base}.{f.attr}" if base else f.attr
    return ""


def _const_str(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _mode(call, pos):
    for kw in call.keywords:
        if kw.arg == "mode":
            return _const_str(kw.value) or "?"
    if len(call.args) > pos:
        return _const_str(call.args[pos]) or "?"
    return "r"


def _writes(mode):
    return mode == "?" or any(c in mode for c in "wax+")


class _Audit(ast.NodeVisitor):
    def __init__(self, path):
        self.path = path
        self.func = ["<module>"]
        self.atomic_files = [set()]      # names bound by `with atomic_write(...) as f` in scope
        self.found = []

    def _scoped(self, node):
        self.func.append(node.name)
        self.atomic_files.append(set(self.atomic_files[-1]))
        self.generic_visit(node)
        self.func.pop()
        self.atomic_files.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_With(self, node):
        added = set()
        for item in node.items:
            ce = item.context_expr
            if isinstance(ce, ast.Call) and _name(ce.func).split(".")[-1].lstrip("_") in ("atomic_write",) and \
                    isinstance(item.optional_vars, ast.Name):
                added.add(item.optional_vars.id)
        self.atomic_files[-1] |= added
        self.generic_visit(node)
        self.atomic_files[-1] -= added

    def _into_atomic(self, call, pos):
        """The call's target file (positional ``pos`` or ``file=``/``fname=``) is an atomic_write file object."""
        target = call.args[pos] if len(call.args) > pos else next(
            (k.value for k in call.keywords if k.arg in ("file", "fp", "fname", "f")), None)
        return isinstance(target, ast.Name) and target.id in self.atomic_files[-1]

    def visit_Call(self, node):
        n = _name(node.func)
        short = n.split(".")[-1]
        bad = None
        if n == "open" and _writes(_mode(node, 1)):
            bad = "open"
        elif n == "os.fdopen" and _writes(_mode(node, 1)):
            bad = "os.fdopen"
        elif short == "open" and n not in ("open", "os.open") and isinstance(node.func, ast.Attribute) and \
                _writes(_mode(node, 0)) and not n.endswith(("zf.open", "zipfile.open")):
            bad = n
        elif n in _ALWAYS:
            bad = n
        elif n in _DUMPERS:
            pos = 1 if n in ("json.dump", "pickle.dump", "torch.save", "marshal.dump") else 0
            if not self._into_atomic(node, pos):
                bad = n
        elif isinstance(node.func, ast.Attribute) and short in _ATTR_WRITERS:
            if not (short in ("savefig", "tofile") and self._into_atomic(node, 0)):
                bad = short
        if bad is not None:
            self.found.append((self.path, self.func[-1], bad, node.lineno))
        self.generic_visit(node)


def audit(roots=SCANNED):
    found = []
    for root in roots:
        for d, dirs, files in os.walk(os.path.join(ROOT, root)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                if f.endswith(".py"):
                    p = os.path.join(d, f)
                    rel = os.path.relpath(p, ROOT).replace(os.sep, "/")
                    with open(p, encoding="utf-8") as fh:
                        a = _Audit(rel)
                        a.visit(ast.parse(fh.read(), p))
                    found += a.found
    return found


def test_every_file_write_goes_through_fileio():
    offenders = [f"{p}:{line} in {fn}(): {call}" for p, fn, call, line in audit()
                 if (p, fn, call) not in ALLOWED]
    assert not offenders, "files written without trnsim.fileio.atomic_write:\n  " + "\n  ".join(offenders)


def test_allowlist_has_no_stale_entries():
    seen = {(p, fn, call) for p, fn, call, _ in audit()}
    stale = [k for k in ALLOWED if k not in seen]
    assert not stale, f"allowlisted writes that no longer exist (remove them): {stale}"


def test_audit_catches_each_kind_of_write(tmp_path):
    src = tmp_path / "bad.py"
    src.write_text(
        "import json, os, tempfile, numpy as np\n"
        "from trnsim.fileio import atomic_write\n"
        "def f(p, fig, doc, path):\n"
        "    with open(p, 'w') as fh:\n"
        "        json.dump(doc, fh)\n"
        "    open(p, mode='ab')\n"
        "    path.write_text('x')\n"
        "    np.save(p, doc)\n"
        "    fig.savefig(p)\n"
        "    fd, tmp = tempfile.mkstemp()\n"
        "    os.replace(tmp, p)\n"
        "    with atomic_write(p, 'wb') as g:\n"
        "        fig.savefig(g, format='png')\n"
        "        json.dump(doc, g)\n"
        "    open(p).read()\n"
        "    open(p, 'rb').read()\n")
    a = _Audit("bad.py")
    a.visit(ast.parse(src.read_text()))
    calls = [c for _, _, c, _ in a.found]
    assert calls == ["open", "json.dump", "open", "write_text", "np.save", "savefig", "tempfile.mkstemp",
                     "os.replace"]
