"""The static half of the loop-body replay (``loop_replay.py``): which loops of a kernel function may be replayed,
and the kernel recompiled with those loops going through the replay iterator.

:func:`rewritten` parses the function's own source (``inspect.getsourcelines``; functions without source,
generators: not rewritten; a closure is recompiled inside a function defining its free variables and runs with
its own cells) and rewrites each eligible ``for NAME in EXPR:`` to ``for NAME in __trnsim_loop__(ID, EXPR):``,
keeping every line number and the file name (trnsim's error messages name the user's kernel line).  The iterator
is a closure cell of the recompiled function, whose globals stay its module's.
Helper functions a loop body calls are checked when the loop starts (:func:`helper_info`, the same rules on
their bodies, with each parameter as the call passes it); ``if`` tests on the index are compiled to one function
of the index (``LoopInfo.outcomes``), evaluated for every iteration when the loop starts.
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
_REWRITTEN: dict = {}    # (id(code), id(loop_fn)) -> (the code object, loop_fn, rewritten code or None)
_LOOP_IDS = itertools.count()


class LoopInfo:
    __slots__ = ("line", "filename", "free", "callees", "subs", "ints", "flags", "var", "tests", "_outcomes")

    def __init__(self, line, filename, var=None):
        self.line = line
        self.filename = filename
        self.var = var           # the loop name (None: a helper function's body, ``helper_info``)
        self.free = set()        # names read in the body and not assigned in it (nor the loop name)
        # calls: (callee chain (root name, attrs...), argument descriptions, keyword argument descriptions); an
        # argument is described as (kind, depends on the index, name): kind "int" (integer arithmetic, a constant
        # or a name holding one), "tensor" (a subscript, a call's result or a body name made by one), "free" (a
        # name from outside the body: its value decides when the loop starts) or "other"
        self.callees = []
        self.subs = set()        # free names subscripted
        self.ints = set()        # free names used in integer arithmetic
        self.flags = set()       # free names read only by ``if`` tests (ints or bools)
        self.tests = []          # the ``if`` tests of the body, in source order (expressions of the index)
        self._outcomes = None    # the tests compiled (``outcomes``)

    def outcomes(self, values):
        """The function ``index -> tuple of the tests' values`` (``values``: the tests' free names)."""
        if self._outcomes is None:
            args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=self.var)], kwonlyargs=[], kw_defaults=[],
                                 defaults=[])
            # each test as the bool ``if`` takes from it (``not not``): ``if i % 4:`` repeats every 4 iterations
            truth = [ast.UnaryOp(op=ast.Not(), operand=ast.UnaryOp(op=ast.Not(), operand=t)) for t in self.tests]
            lam = ast.Expression(body=ast.Lambda(args=args, body=ast.Tuple(elts=truth, ctx=ast.Load())))
            ast.fix_missing_locations(lam)
            self._outcomes = compile(lam, self.filename, "eval")
        return eval(self._outcomes, dict(values))     # noqa: S307  (the kernel's own tests, checked by _Body.test)


# integer arithmetic: + - * keep every value computed from the index affine in it (``*`` with one operand free of
# the index); // and % only on values free of the index
_BINOPS = (ast.Add, ast.Sub, ast.Mult)
_CONST_BINOPS = (ast.FloorDiv, ast.Mod)


class _Body:
    """Checks one loop body (raises _Ineligible), or a helper function's body (``var`` None, ``params``: each
    parameter's (kind, depends on the index) as the call passes it)."""

    def __init__(self, body, info, allnames, var=None, params=None):
        self.var = var
        self.allnames = allnames
        self.info = info
        self.assigned = set()    # body names assigned so far (in statement order)
        self.dep = {var} if var is not None else set()    # names depending on the loop index
        self.from_tensor = set()     # body names assigned a subscript or a call (tensors or None)
        self.opaque = set()      # helper parameters that may be neither subscripted nor used in arithmetic
        self.helper = params is not None
        for p, (kind, d) in (params or {}).items():
            self.assigned.add(p)
            if d:
                self.dep.add(p)
            if kind == "tensor":
                self.from_tensor.add(p)
            elif kind != "int":
                self.opaque.add(p)
        last = len(body) - 1
        for j, st in enumerate(body):
            if self.helper and isinstance(st, ast.Return) and j == last:
                if st.value is not None:
                    self.expr(st.value)
                continue
            self.stmt(st)

    def stmt(self, st):
        if isinstance(st, ast.Pass):
            return
        if isinstance(st, ast.If) and not self.helper:
            self.test(st.test)
            self.info.tests.append(st.test)
            a0, d0, f0 = set(self.assigned), set(self.dep), set(self.from_tensor)
            for x in st.body:
                self.stmt(x)
            a1, d1, f1 = self.assigned, self.dep, self.from_tensor
            self.assigned, self.dep, self.from_tensor = a0, d0, f0
            for x in st.orelse:
                self.stmt(x)
            # after the ``if``: assigned only if both branches assign it (a name one branch leaves would hold the
            # previous iteration's value: state carried between iterations, refused where it is read)
            self.assigned = a1 & self.assigned
            self.dep = d1 | self.dep
            self.from_tensor = f1 | self.from_tensor
            return
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
            return       # a docstring (or a string on its own)
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
            if not isinstance(f, ast.Name) or f.id in self.assigned or f.id == self.var:
                raise _Ineligible("callee not a name from outside the body or an attribute of one")
            if f.id in self.allnames:
                raise _Ineligible("a body name read before it is assigned (state carried between iterations)")
            self.info.free.add(f.id)
            d = False
            descs = []
            for a in e.args:
                if isinstance(a, ast.Starred):
                    raise _Ineligible("starred")
                desc = self.arg(a)
                d = desc[1] or d
                descs.append(desc)
            kws = {}
            for k in e.keywords:
                if k.arg is None:
                    raise _Ineligible("**kwargs")
                desc = self.arg(k.value)
                d = desc[1] or d
                kws[k.arg] = desc
            self.info.callees.append(((f.id,) + tuple(reversed(chain)), tuple(descs), kws))
            return d
        raise _Ineligible(type(e).__name__)

    def arg(self, a):
        """A call argument checked, described as ``LoopInfo.callees`` has it: (kind, depends on the index,
        name of a free name or None)."""
        if isinstance(a, ast.Name) and a.id != self.var and a.id not in self.assigned:
            return ("free", self.name(a), a.id)
        if isinstance(a, ast.Name) and a.id in self.from_tensor or isinstance(a, (ast.Subscript, ast.Call)):
            return ("tensor", self.expr(a), None)
        if (isinstance(a, ast.Name) and a.id not in self.opaque or isinstance(a, (ast.BinOp, ast.UnaryOp))
                or isinstance(a, ast.Constant) and type(a.value) is int):
            try:
                return ("int", self.intexpr(a), None)
            except _Ineligible:
                pass         # (e.g. a float constant's product: checked as any other expression below)
        return ("other", self.expr(a), None)

    def test(self, e):
        """An ``if`` test: comparisons, ``and``/``or``/``not`` and integer arithmetic (any operator) of the loop
        index, int constants and names from outside the body (evaluated for every index when the loop starts,
        so the branches taken are known before any iteration is skipped)."""
        if isinstance(e, ast.BoolOp):
            for x in e.values:
                self.test(x)
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.Not, ast.USub)):
            self.test(e.operand)
        elif isinstance(e, ast.Compare):
            self.test(e.left)
            for x in e.comparators:
                self.test(x)
        elif isinstance(e, ast.BinOp):
            if not isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
                raise _Ineligible(type(e.op).__name__)
            self.test(e.left)
            self.test(e.right)
        elif isinstance(e, ast.Constant):
            if type(e.value) not in (int, bool):
                raise _Ineligible("a test constant that is not an int")
        elif isinstance(e, ast.Name):
            if e.id == self.var:
                return
            if e.id in self.assigned or e.id in self.allnames:
                raise _Ineligible("a test reading a body name")
            self.info.free.add(e.id)
            self.info.flags.add(e.id)
        else:
            raise _Ineligible("test " + type(e).__name__)

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
                if e.id in self.from_tensor or e.id in self.opaque:
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


def _assigned_names(body):
    """Every name a statement list assigns (``if`` branches included)."""
    out = set()
    for st in body:
        if isinstance(st, ast.Assign):
            out.update(t.id for t in st.targets if isinstance(t, ast.Name))
        elif isinstance(st, ast.If):
            out |= _assigned_names(st.body) | _assigned_names(st.orelse)
    return out


def _check_loop(loop, filename):
    """A LoopInfo for an eligible ``for`` loop, else None."""
    if loop.orelse or not isinstance(loop.target, ast.Name) or isinstance(loop, ast.AsyncFor):
        return None
    info = LoopInfo(loop.lineno, filename, loop.target.id)
    try:
        _Body(loop.body, info, _assigned_names(loop.body), var=loop.target.id)
    except _Ineligible:
        return None
    return info


_HELPERS: dict = {}       # (id(code), the parameters' kinds) -> (code, LoopInfo of its body or None)


def helper_info(fn, params):
    """A LoopInfo of helper function ``fn``'s body (its free names, calls, subscripts and arithmetic) when a loop
    body may call it, else None.  ``params``: each parameter name -> (kind, depends on the index) as the call
    passes it.  Eligible: the body of a loop body (assignments to names, calls, ``pass``), no ``if``, a
    ``return`` only as the last statement; no ``*args``/``**kwargs``; source that is the function's own code."""
    code = fn.__code__
    key = (id(code), tuple(sorted(params.items())))
    hit = _HELPERS.get(key)
    if hit is not None and hit[0] is code:
        return hit[1]
    out = None
    try:
        if not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR |
                                inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            parsed = _parse(fn)
            if parsed is not None:
                fdef = parsed[0]
                info = LoopInfo(fdef.lineno, code.co_filename)
                _Body(fdef.body, info, _assigned_names(fdef.body), params=params)
                out = info
    except Exception:           # (_Ineligible, no source, syntax the pass does not know): not followed
        out = None
    if len(_HELPERS) < 4096:
        _HELPERS[key] = (code, out)
    return out


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
        new = hit[2]
    else:
        try:
            new = _make(fn, loop_fn)
        except Exception:           # no source, syntax the pass does not know: the kernel runs as written
            new = None
        if len(_REWRITTEN) < 4096:
            _REWRITTEN[key] = (code, loop_fn, new)
    # (the function made per call: a closure's cells differ from one call of the function that made it to the
    # next, the code does not)
    return None if new is None else _function(fn, new, loop_fn)


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


def _in_outer(fdef, names, extra=()):
    """``def __trnsim_outer__(*extra, *names): <fdef>; return <fdef's name>``: compiled, the function inside has
    ``names`` (the original function's closure variables) as its own free variables, as it had where it was
    defined."""
    params = [ast.arg(arg=n) for n in tuple(extra) + tuple(names)]
    outer = ast.FunctionDef(
        name="__trnsim_outer__",
        args=ast.arguments(posonlyargs=[], args=params, kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))], decorator_list=[])
    ast.copy_location(outer, fdef)
    mod = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(mod)
    return mod


def _inner_code(mod, filename, flags, name):
    mcode = compile(mod, filename, "exec", flags=flags, dont_inherit=True)
    ocode = next(c for c in mcode.co_consts if isinstance(c, types.CodeType))
    return next(c for c in ocode.co_consts if isinstance(c, types.CodeType) and c.co_name == name)


def _parse(fn):
    """``(the function's def as an AST with the file's line numbers, compiler flags)`` when ``fn``'s source is what
    its code was compiled from, else None.  A closure (a function defined inside another, reading the outer
    one's names) is compiled for the check inside a function that defines those names, as where it was
    written."""
    code = fn.__code__
    if "__class__" in code.co_freevars:        # (``super()`` in a method: a cell the class statement makes)
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
    if code.co_freevars:
        plain = _inner_code(_in_outer(fdef, code.co_freevars), code.co_filename, flags, fdef.name)
    else:
        plain = compile(tree, code.co_filename, "exec", flags=flags, dont_inherit=True)
        plain = next(c for c in plain.co_consts if isinstance(c, types.CodeType))
    if plain.co_freevars != code.co_freevars or not _same_code(plain, code):
        return None
    return fdef, flags


def _make(fn, loop_fn):
    """The rewritten code object of ``fn`` (its free variables: ``__trnsim_loop__`` and ``fn``'s own), or None."""
    code = fn.__code__
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return None
    parsed = _parse(fn)
    if parsed is None:
        return None
    fdef, flags = parsed
    fdef.decorator_list = []
    n0 = len(LOOPS)
    _Rewrite(code.co_filename).generic_visit(fdef)     # (visit() would leave the def alone as nested)
    if len(LOOPS) == n0:
        return None
    # def __trnsim_outer__(__trnsim_loop__, <fn's free variables>): <the kernel>; return <the kernel>: the kernel
    # compiled there reads the iterator and the closure variables from cells, and its globals stay its module's
    new = _inner_code(_in_outer(fdef, code.co_freevars, ("__trnsim_loop__",)), code.co_filename, flags, fdef.name)
    if hasattr(code, "co_qualname"):
        new = new.replace(co_qualname=code.co_qualname)
    return new


def _function(fn, new, loop_fn):
    """A function running code ``new`` with ``fn``'s globals, defaults and closure cells (the same cells: a
    closure variable the enclosing function changes later is seen), and ``loop_fn`` as ``__trnsim_loop__``."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells["__trnsim_loop__"] = types.CellType(loop_fn)
    out = types.FunctionType(new, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[n] for n in new.co_freevars))
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__ = fn.__qualname__
    out.__module__ = fn.__module__
    out.__doc__ = fn.__doc__
    out.__dict__.update(fn.__dict__)
    return out
