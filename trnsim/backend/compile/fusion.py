"""Group the ops of an aten FX graph into the fused kernels they become on the device.

Greedy, in graph order:

* an elementwise op joins the kernel of one of its producers when it covers the same elements (a pointwise chain,
  a matmul's output as its epilogue, a row kernel's rows or per-row values), unless that would make two kernels
  depend on each other; else it starts a pointwise kernel;
* a reduction over the trailing dims, a softmax and its backward are row ops: they join a producer's pointwise or
  row kernel over the same ``[R, C]`` rows (normalisation and softmax end up as one kernel with the elementwise ops
  around them), else start a row kernel;
* a matmul starts a matmul kernel; reductions over leading dims and every other op (``opaque``) are kernels of their
  own.

A value is *materialised* (written to HBM, rounded once to its dtype) when an op of another kernel, or the graph's
output, reads it (through any views).  Everything else stays on chip in fp32.
"""

from __future__ import annotations

import math

import torch

from . import ops as O

_LOW = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)


def val(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def numel(node):
    v = val(node)
    return v.numel() if isinstance(v, torch.Tensor) else None


def tensor_inputs(node):
    out = []

    def visit(a):
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for b in a:
                visit(b)
    for a in node.args:
        visit(a)
    for a in node.kwargs.values():
        visit(a)
    return out


class Group:
    __slots__ = ("id", "kind", "nodes", "numel", "R", "C", "anchor", "succ")

    def __init__(self, gid, kind, numel=None, R=None, C=None, anchor=None):
        self.id, self.kind, self.numel, self.R, self.C, self.anchor = gid, kind, numel, R, C, anchor
        self.nodes = []
        self.succ = set()


def _row_geometry(node):
    """(R, C) of a row op, or None when it is not over the trailing dims."""
    name = O.op_name(node.target)
    x = node.args[0]
    xv = val(x)
    if not isinstance(xv, torch.Tensor) or xv.dim() == 0:
        return None
    nd = xv.dim()
    if name in O._SOFTMAX or name in O._SOFTMAX_BW:
        d = node.args[1] if name in O._SOFTMAX else node.args[2]
        d = d % nd
        if d != nd - 1:
            return None
        C = xv.shape[-1]
        return (xv.numel() // max(C, 1), C)
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or dims == []:
        dims = list(range(nd))
    if isinstance(dims, int):
        dims = [dims]
    dims = sorted(d % nd for d in dims)
    if dims != list(range(nd - len(dims), nd)):
        return None
    C = math.prod(xv.shape[nd - len(dims):])
    if C == 0:
        return None
    return (xv.numel() // C, C)


class Fusion:
    """The grouping of one graph: ``groups`` (in execution order) and ``group_of`` (node -> Group)."""

    def __init__(self, gm):
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.index = {n: i for i, n in enumerate(self.nodes)}
        self.groups = []
        self.group_of = {}
        self.root = {}
        self.unsupported = []
        self.readers = {}          # value (root) -> groups that read it from outside
        for n in self.nodes:
            self._place(n)
        self.groups = [g for g in self.groups if g.nodes]
        self.materialised = self._materialised()

    # -- helpers ----------------------------------------------------------------------------------------------
    def _root(self, n):
        return self.root.get(n, n)

    def _producer_groups(self, n):
        gs = []
        for a in tensor_inputs(n):
            g = self.group_of.get(self._root(a))
            if g is not None and g not in gs:
                gs.append(g)
        return gs

    def _reaches(self, src, dst):
        seen, stack = set(), [src]
        while stack:
            g = stack.pop()
            if g is dst:
                return True
            if g.id in seen:
                continue
            seen.add(g.id)
            stack.extend(g.succ)
        return False

    def _new(self, kind, **kw):
        g = Group(len(self.groups), kind, **kw)
        self.groups.append(g)
        return g

    def _join(self, n, g, producers):
        g.nodes.append(n)
        self.group_of[n] = g
        for p in producers:
            if p is not g:
                p.succ.add(g)
        for a in tensor_inputs(n):
            r = self._root(a)
            if r not in self.group_of or self.group_of[r] is not g:
                lst = self.readers.setdefault(r, [])
                if g not in lst:
                    lst.append(g)
        if g.kind in ("pointwise", "rows"):
            self._merge_siblings(n, g)

    def _can_join(self, g, producers):
        return all(p is g or not self._reaches(g, p) for p in producers)

    def _indirect(self, a, b):
        """Whether a path of groups leads from ``a`` to ``b`` through at least one other group."""
        seen, stack = set(), [s for s in a.succ if s is not b]
        while stack:
            g = stack.pop()
            if g is b:
                return True
            if g.id in seen:
                continue
            seen.add(g.id)
            stack.extend(g.succ)
        return False

    def _merge(self, g, h):
        """Put group ``h``'s nodes into ``g`` (same kind and domain, no path between them through a third)."""
        for n in h.nodes:
            self.group_of[n] = g
        g.nodes = sorted(g.nodes + h.nodes, key=self.index.__getitem__)
        h.nodes = []
        g.succ |= {s for s in h.succ if s is not g}
        g.succ.discard(h)
        for o in self.groups:
            if h in o.succ:
                o.succ.discard(h)
                if o is not g:
                    o.succ.add(g)
        for lst in self.readers.values():
            if h in lst:
                lst.remove(h)
                if g not in lst:
                    lst.append(g)

    def _same_domain(self, g, h):
        return g.kind == h.kind and g.kind in ("pointwise", "rows") and (g.numel, g.R, g.C) == (h.numel, h.R, h.C)

    def _merge_siblings(self, n, g):
        """After ``n`` joined ``g``: merge the other groups over the same elements that feed ``n`` or read the same
        inputs as it (horizontal fusion: one load of the shared inputs, one kernel)."""
        cands = self._producer_groups(n)
        for a in tensor_inputs(n):
            cands += self.readers.get(self._root(a), [])
        for h in cands:
            if h is g or not h.nodes or not self._same_domain(g, h):
                continue
            if self._indirect(g, h) or self._indirect(h, g):
                continue
            self._merge(g, h)

    # -- placement ----------------------------------------------------------------------------------------------
    def _place(self, n):
        if n.op in ("placeholder", "output", "get_attr"):
            return
        if n.op != "call_function":
            self.unsupported.append(n)
            return
        k = O.kind(n.target)
        if k is None:
            self.unsupported.append(n)
            return
        producers = self._producer_groups(n)
        if k == "view":
            ins = tensor_inputs(n)
            if ins:
                self.root[n] = self._root(ins[0])
            return
        if k in ("pointwise", "factory"):
            ne = numel(n)
            for g in producers:
                if ne is None or not self._can_join(g, producers):
                    continue
                if (g.kind == "pointwise" and g.numel == ne) or (g.kind == "matmul" and g.numel == ne) or \
                        (g.kind == "rows" and ne in (g.R * g.C, g.R)):
                    self._join(n, g, producers)
                    return
            self._join(n, self._new("pointwise", numel=ne), producers)
            return
        if k in ("reduce", "softmax", "softmax_bw"):
            geo = _row_geometry(n)
            if geo is not None and geo[1] <= 16384:
                R, C = geo
                for g in producers:
                    if not self._can_join(g, producers):
                        continue
                    if g.kind == "rows" and (g.R, g.C) == (R, C):
                        self._join(n, g, producers)
                        return
                    if g.kind == "pointwise" and g.numel == R * C:
                        g.kind, g.R, g.C = "rows", R, C
                        self._join(n, g, producers)
                        return
                self._join(n, self._new("rows", R=R, C=C), producers)
                return
            if k == "reduce":
                self._join(n, self._new("reduce", anchor=n), producers)
                return
            self._join(n, self._new("opaque", anchor=n), producers)
            return
        if k == "matmul":
            self._join(n, self._new("matmul", numel=numel(n), anchor=n), producers)
            return
        if k in ("custom", "collective"):    # runs as itself (nki_bridge; the collectives model), never fused
            self._join(n, self._new(k, anchor=n), producers)
            return
        self._join(n, self._new("opaque", anchor=n), producers)

    def _materialised(self):
        mat = set()
        for n in self.nodes:
            if n.op == "output":
                for a in tensor_inputs(n):
                    r = self._root(a)
                    if r in self.group_of:
                        mat.add(r)
                continue
            g = self.group_of.get(n)
            if g is None:
                continue
            for a in tensor_inputs(n):
                r = self._root(a)
                pg = self.group_of.get(r)
                if pg is not None and (pg is not g or g.kind in ("opaque", "custom", "collective")):
                    mat.add(r)
        for g in self.groups:
            if g.kind in ("opaque", "custom", "collective"):
                mat.update(g.nodes)
        return mat

    def external_inputs(self, g):
        """The distinct values (roots) a group reads from outside itself: placeholders, constants, other groups."""
        seen, out = set(), []
        for n in g.nodes:
            for a in tensor_inputs(n):
                r = self._root(a)
                if self.group_of.get(r) is g or r in seen:
                    continue
                seen.add(r)
                out.append(r)
        return out

    def outputs(self, g):
        return [n for n in g.nodes if n in self.materialised]
