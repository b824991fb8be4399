"""The static half of the loop-body replay (``loop_replay.py``): which loops of a kernel function may be replayed,
and the kernel recompiled with those loops going through the replay iterator.

:func:`rewritten` parses the function's own source (``inspect.getsourcelines``; functions with closures, without
source, generators: not rewritten) and rewrites each eligible ``for NAME in EXPR:`` to ``for NAME in
__trnsim_loop__(ID, EXPR):``, keeping every line number and the file name (trnsim's error messages name the
user's kernel line).  The iterator is a closure cell of the recompiled function, whose globals stay its module's.
The conditions a loop body must meet are listed in ``loop_replay``'s docstring; what this pass cannot know (what
a name holds, what a callee is) is recorded per loop (:class:`LoopInfo`) and checked when the loop starts.
"""

from __future__ import annotations

import ast
import dis
import inspect
import itertools
import textwrap
import types

__all__ = ["rewritten", "LoopInfo", "LOOPS"]

class _Ineligible(Exception):
    pass


LOOPS: dict = {}        # loop id -> LoopInfo
_REWRITTEN: dict = {}    # (id(code), id(loop_fn)) -> (the code object, loop_fn, rewritten function or None)
_LOOP_IDS = itertools.count()


class LoopInfo:
    __slots__ = ("line", "filename", "free", "callees", "subs", "ints")

    def __init__(self, line, filename):
        self.line = line
        self.filename = filename
        self.free = set()        # names read in the body and not assigned in it (nor the loop name)
        self.callees = []        # callee chains: (root name, attrs...)
        self.subs = set()        # free names subscripted
        self.ints = set()        # free names used in integer arithmetic


# integer arithmetic: + - * keep every value computed from the index affine in it (``*`` with one operand free of
# the index); // and % only on values free of the index
_BINOPS = (ast.Add, ast.Sub, ast.Mult)
_CONST_BINOPS = (ast.FloorDiv, ast.Mod)


class _Body:
    """Checks one loop body (raises _Ineligible)."""

    def __init__(self, loop, info, allnames):
        self.var = loop.target.id
        self.allnames = allnames
        self.info = info
        self.assigned = set()    # body names assigned so far (in statement order)
        self.dep = {self.var}    # names depending on the loop index
        self.from_tensor = set()     # body names assigned a subscript or a call (tensors or None)
        for st in loop.body:
            self.stmt(st)

    def stmt(self, st):
        if isinstance(st, ast.Pass):
            return
        if isinstance(st, ast.Expr):
            if not isinstance(st.value, ast.Call):
                raise _Ineligible("expression statement that is not a call")
            self.expr(st.value)
            return
        if isinstance(st, ast.Assign):
            if not all(isinstance(t, ast.Name) for t in st.targets):
                raise _Ineligible("assignment to something other than a name")
            d = self.expr(st.value)
            for t in st.targets:
                if t.id == self.var:
                    raise _Ineligible("the loop name assigned in the body")
                self.assigned.add(t.id)
                if d:
                    self.dep.add(t.id)
                else:
                    self.dep.discard(t.id)
                if isinstance(st.value, (ast.Call, ast.Subscript)):
                    self.from_tensor.add(t.id)
                else:
                    self.from_tensor.discard(t.id)
            return
        raise _Ineligible(type(st).__name__)

    def name(self, n):
        if not isinstance(n.ctx, ast.Load):
            raise _Ineligible("store")
        if n.id == self.var or n.id in self.assigned:
            return n.id in self.dep
        if n.id in self.allnames:
            raise _Ineligible("a body name read before it is assigned (state carried between iterations)")
        self.info.free.add(n.id)
        return False

    def expr(self, e):
        """Checks ``e``; returns whether it depends on the loop index."""
        if isinstance(e, ast.Constant):
            if not isinstance(e.value, (int, float, str, type(None))):
                raise _Ineligible("constant")
            return False
        if isinstance(e, ast.Name):
            return self.name(e)
        if isinstance(e, ast.Attribute):
            if not isinstance(e.ctx, ast.Load):
                raise _Ineligible("store")
            return self.expr(e.value)
        if isinstance(e, ast.Subscript):
            if not isinstance(e.value, ast.Name):
                raise _Ineligible("subscript of something other than a name")
            base = e.value.id
            if base in self.assigned:
                if base not in self.from_tensor:
                    raise _Ineligible("subscript of a body name not made by a call or subscript")
            elif base != self.var:
                self.info.subs.add(base)
            else:
                raise _Ineligible("subscript of the loop index")
            d = self.expr(e.value)
            return self.index(e.slice) or d
        if isinstance(e, (ast.Tuple, ast.List)):
            if not isinstance(e.ctx, ast.Load):
                raise _Ineligible("store")
            d = False
            for x in e.elts:
                if isinstance(x, ast.Starred):
                    raise _Ineligible("starred")
                d = self.expr(x) or d
            return d
        if isinstance(e, ast.BinOp):
            if not isinstance(e.op, _BINOPS + _CONST_BINOPS):
                raise _Ineligible(type(e.op).__name__)
            a = self.intexpr(e.left)
            b = self.intexpr(e.right)
            if a and b and isinstance(e.op, ast.Mult):
                raise _Ineligible("product of two index-dependent values")
            if (a or b) and isinstance(e.op, _CONST_BINOPS):
                raise _Ineligible("// or % of an index-dependent value")
            return a or b
        if isinstance(e, ast.UnaryOp):
            if not isinstance(e.op, ast.USub):
                raise _Ineligible(type(e.op).__name__)
            return self.intexpr(e.operand)
        if isinstance(e, ast.Call):
            chain = []
            f = e.func
            while isinstance(f, ast.Attribute):
                chain.append(f.attr)
                f = f.value
            if not isinstance(f, ast.Name) or not chain or f.id in self.assigned or f.id == self.var:
                raise _Ineligible("callee not an attribute of an outside name")
            self.info.free.add(f.id)
            self.info.callees.append((f.id,) + tuple(reversed(chain)))
            d = False
            for a in e.args:
                if isinstance(a, ast.Starred):
                    raise _Ineligible("starred")
                d = self.expr(a) or d
            for k in e.keywords:
                if k.arg is None:
                    raise _Ineligible("**kwargs")
                d = self.expr(k.value) or d
            return d
        raise _Ineligible(type(e).__name__)

    def intexpr(self, e):
        """An operand of integer arithmetic: an int constant, a name holding an int, or arithmetic of these."""
        if isinstance(e, ast.Constant):
            if type(e.value) is not int:
                raise _Ineligible("arithmetic on a non-integer constant")
            return False
        if isinstance(e, ast.Name):
            if e.id == self.var:
                return True
            if e.id in self.assigned:
                if e.id in self.from_tensor:
                    raise _Ineligible("arithmetic on a call's or subscript's result")
                return self.name(e)
            self.info.ints.add(e.id)
            return self.name(e)
        if isinstance(e, (ast.BinOp, ast.UnaryOp)):
            return self.expr(e)
        raise _Ineligible("arithmetic operand " + type(e).__name__)

    def index(self, s):
        if isinstance(s, ast.Slice):
            d = False
            for x in (s.lower, s.upper, s.step):
                if x is not None:
                    d = self.intexpr(x) or d
            return d
        if isinstance(s, ast.Tuple):
            d = False
            for x in s.elts:
                d = self.index(x) or d
            return d
        if isinstance(s, ast.Constant) and s.value is None:
            return False
        return self.intexpr(s)


def _check_loop(loop, filename):
    """A LoopInfo for an eligible ``for`` loop, else None."""
    if loop.orelse or not isinstance(loop.target, ast.Name) or isinstance(loop, ast.AsyncFor):
        return None
    info = LoopInfo(loop.lineno, filename)
    allnames = {t.id for st in loop.body if isinstance(st, ast.Assign) for t in st.targets
                if isinstance(t, ast.Name)}
    try:
        _Body(loop, info, allnames)
    except _Ineligible:
        return None
    return info


class _Rewrite(ast.NodeTransformer):
    def __init__(self, filename):
        self.filename = filename

    def visit_FunctionDef(self, node):        # nested functions: left alone
        return node

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_For(self, node):
        self.generic_visit(node)
        info = _check_loop(node, self.filename)
        if info is None:
            return node
        lid = next(_LOOP_IDS)
        LOOPS[lid] = info
        call = ast.Call(func=ast.Name(id="__trnsim_loop__", ctx=ast.Load()),
                        args=[ast.Constant(value=lid), node.iter], keywords=[])
        node.iter = ast.copy_location(call, node.iter)
        ast.fix_missing_locations(node)
        return node


_FUTURE = 0
for _f in ("annotations", "division", "generator_stop"):
    try:
        _FUTURE |= getattr(__import__("__future__"), _f).compiler_flag
    except AttributeError:
        pass


def rewritten(fn, loop_fn):
    """``fn`` with its eligible loops going through ``loop_fn(loop id, iterable)``, or None (no eligible loop, or
    no source, closures, a generator...).  Cached per code object."""
    if not isinstance(fn, types.FunctionType):
        return None
    code = fn.__code__
    key = (id(code), id(loop_fn))          # (by identity: code objects compare equal by value)
    hit = _REWRITTEN.get(key)
    if hit is not None and hit[0] is code and hit[1] is loop_fn:
        return hit[2]
    out = None
    try:
        out = _make(fn, loop_fn)
    except Exception:           # no source, syntax the pass does not know: the kernel runs as written
        out = None
    if len(_REWRITTEN) < 4096:
        _REWRITTEN[key] = (code, loop_fn, out)
    return out


def _ops(code):
    """``code``'s instructions as (operation, argument, line), jump targets left out and ``LOAD_METHOD`` read as
    ``LOAD_ATTR`` (the compiler chooses between them, and whether ``LOAD_GLOBAL`` pushes a NULL, by whether the
    module imported the name, which a function compiled on its own does not know)."""
    out = []
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op == "EXTENDED_ARG" or op == "CACHE":
            continue
        if op == "LOAD_METHOD":
            op = "LOAD_ATTR"
        arg = None if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs else ins.argval
        out.append((op, arg, ins.positions.lineno if ins.positions else None))
    return out


def _same_code(a, b):
    """Whether code objects ``a`` and ``b`` were compiled from the same source (instructions and their lines,
    names, constants, recursively)."""
    if (a.co_names != b.co_names or a.co_varnames != b.co_varnames or a.co_firstlineno != b.co_firstlineno
            or len(a.co_consts) != len(b.co_consts) or _ops(a) != _ops(b)):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType):
            if not isinstance(y, types.CodeType) or not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _make(fn, loop_fn):
    code = fn.__code__
    if code.co_freevars or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                                            inspect.CO_ASYNC_GENERATOR):
        return None
    lines, start = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    fdef = tree.body[0]
    if fdef.name != code.co_name:
        return None
    ast.increment_lineno(tree, start - 1)
    # the source must be what the function was compiled from (a file edited since the import would give another
    # function): the source compiled as it is must give the function's own code
    flags = code.co_flags & _FUTURE
    plain = compile(tree, code.co_filename, "exec", flags=flags, dont_inherit=True)
    if not _same_code(next(c for c in plain.co_consts if isinstance(c, types.CodeType)), code):
        return None
    fdef.decorator_list = []
    n0 = len(LOOPS)
    _Rewrite(code.co_filename).generic_visit(fdef)     # (visit() would leave the def alone as nested)
    if len(LOOPS) == n0:
        return None
    # def __trnsim_outer__(__trnsim_loop__): <the kernel>; return <the kernel>  (the iterator a closure cell, so the
    # kernel's globals stay its module's own)
    outer = ast.FunctionDef(
        name="__trnsim_outer__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="__trnsim_loop__")], kwonlyargs=[], kw_defaults=[],
                           defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))], decorator_list=[])
    ast.copy_location(outer, fdef)
    mod = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(mod)
    mcode = compile(mod, code.co_filename, "exec", flags=flags, dont_inherit=True)
    ocode = next(c for c in mcode.co_consts if isinstance(c, types.CodeType))
    outer_fn = types.FunctionType(ocode, fn.__globals__)
    new = outer_fn(loop_fn)
    new.__code__ = new.__code__.replace(co_qualname=code.co_qualname) if hasattr(code, "co_qualname") \
        else new.__code__
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__dict__.update(fn.__dict__)
    return new
