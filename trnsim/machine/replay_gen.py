"""Straight-line replay functions for the issue cache (``trnsim/kernels/issue_cache.py``).

A cached operand layout replays the same steps at every call: the instruction's numerics (a values function
called with the call's tensors, the core, its source line and constants) and its records.  ``NeuronCore.replay``
does a record generically (a loop over operand triples, a branch per operand); here one Python function is
generated per layout, with the constants of every step (engine, cost, opcode, the operands' extents and access
patterns when the layout fixes them, the occupancy code of each operand) written into it.  It does exactly what
``NeuronCore.replay`` does, in the same order for each structure it changes (occupancy live ranges, then the
operand columns, then the instruction's row), so records, columns and live ranges are the same objects
with the same values.  When the core keeps no record columns, or a multi-program launch is running, the generated
function hands over to ``slow`` (the generic replay), as ``NeuronCore.replay`` does.
"""

from __future__ import annotations

__all__ = ["compile_program", "compiled_source", "program_lines", "touch_plain"]

_CODE: dict = {}     # source -> its compiled module code (compile_program)


def compiled_source(src, cache, filename):
    """``src`` compiled (``compile(..., "exec")``), kept in ``cache`` by its text (at most 4,096 sources: generated
    sources depend on structure only, so a run sees few; past that each is compiled anew rather than held)."""
    code = cache.get(src)
    if code is None:
        code = compile(src, filename, "exec")
        if len(cache) < 4096:
            cache[src] = code
    return code


def _dge_norm(dge):
    if dge is not None and dge[0] == 0 and dge[1] < 0:
        return None
    return dge


def touch_plain(occ, buf, loc, sb, ps):
    """Instruction ``occ.seq`` touches plain tile ``buf`` (not a block tensor) through its occupancy table: its
    live range begun (``Occupancy.first``) or extended; the entry is then kept on the buffer (``buf.live``) when
    ``buf`` is in this core's SBUF ``sb`` or PSUM ``ps``, so the next touch updates it without a lookup (the same
    list object as the table's: ``Occupancy`` never replaces an entry, it updates it in place).  The replay's
    touch of a plain tile: ``NeuronCore.replay`` calls it when the buffer keeps no entry of this core, and the
    generated replay (:func:`program_lines`) writes the same steps inline."""
    k = (buf.id, -1)
    ranges = occ.ranges
    rg = ranges.get(k)
    if rg is None:
        rg = occ.first(k, buf, loc)
    else:
        rg[1] = occ.seq
        rg[3] = loc
    sp = buf.space
    if sp is sb or sp is ps:
        buf.live = rg


def compile_program(steps, slow):
    """A function ``run(core, loc, leaves)`` doing ``steps`` in order:

    * ``("call", fn, args)``: ``fn(*resolved)`` where each of ``args`` is ``("const", value)``, ``("leaf", i)``
      (``leaves[i]``), ``("core",)``, ``("loc",)`` or ``("expr", f)`` (``f(core, loc, leaves)``);
    * ``("rec", opcode, engine, ops, nw, cost, flops, pre, dma)``: ``NeuronCore.replay`` of one instruction whose
      operands are ``ops`` (``(leaf index, occupancy code, (lo, hi, view) or None)``, writes first, ``nw`` of
      them), ``dma`` None or ``(nbytes, rows, part0, dge)``.

    ``slow(core, loc, leaves)`` runs instead when ``core._record`` is off or ``core.programs`` is set."""
    consts = {"_slow": slow}
    lines = ["def run(core, loc, leaves):",
             "    if not core._record or core.programs is not None:",
             "        return _slow(core, loc, leaves)"]
    lines += program_lines(steps, consts, "K", lambda i: f"leaves[{i}]", "leaves")
    src = "\n".join(lines) + "\n"
    # the source depends only on the steps' structure (constants are names): compiled once per structure
    code = compiled_source(src, _CODE, "<trnsim issue-cache replay>")
    ns = dict(consts)
    exec(code, ns)   # noqa: S102  (defines run; the source was made above from the steps, no outside input)
    run = ns["run"]
    run.source = src
    return run


def program_lines(steps, consts, prefix, leaf, leaves="leaves", indent="    "):
    """The body of :func:`compile_program`'s ``run`` for ``steps`` (after its hand-over test), as source lines
    indented by ``indent``: the code reads ``core`` and ``loc``, operand ``i`` as the expression ``leaf(i)`` and the
    list of all operands as ``leaves`` (only for a ``("expr", f)`` argument); each constant is put in ``consts``
    under a new name starting with ``prefix``.  A plain tile's touch is :func:`touch_plain`, written inline.  The
    code's own names (``occ``, ``s``, ``cols``, ``sb``, ``ps``, ``k``, ``rg``, ``t<i>``, ``o<i>``, ``b<i>``,
    ``v<j>``, ``lo<j>``, ``hi<j>``) must not be used by the code around it."""
    lines = []

    def const(v):
        name = f"{prefix}{len(consts)}"
        consts[name] = v
        return name

    def w(line):
        lines.append(indent + line)

    for step in steps:
        if step[0] == "call":
            args = []
            for a in step[2]:
                code = a[0]
                if code == "const":
                    args.append(const(a[1]))
                elif code == "leaf":
                    args.append(leaf(a[1]))
                elif code == "core":
                    args.append("core")
                elif code == "loc":
                    args.append("loc")
                else:
                    args.append(f"{const(a[1])}(core, loc, {leaves})")
            w(f"{const(step[1])}({', '.join(args)})")
            continue
        _, opcode, engine, ops, nw, cost, flops, pre, dma = step
        w("occ = core.occupancy")
        w("s = occ.seq")
        w("cols = core.columns")
        used = sorted({i for i, _, _ in ops})
        for i in used:
            w(f"t{i} = {leaf(i)}")
            w(f"o{i} = t{i}.buf")
            w(f"b{i} = o{i}.id")
        if any(oc == 1 for _, oc, _ in ops):
            w("sb = core.sbuf")
            w("ps = core.psum")
        touched = set()
        for i, oc, _ in ops:        # the occupancy, operand by operand (NeuronCore.replay's first half)
            if oc == 1:
                if i in touched:    # the same tile again in this instruction: its range already ends here
                    continue
                touched.add(i)
                # (the tile's entry kept on it, Buffer.live, when this core's space holds it: touch_plain, inline)
                w(f"rg = o{i}.live")
                w(f"if rg is None or (o{i}.space is not sb and o{i}.space is not ps):")
                w(f"    k = (b{i}, -1)")
                w("    rg = occ.ranges.get(k)")
                w("    if rg is None:")
                w(f"        rg = occ.first(k, o{i}, loc)")
                w("    else:")
                w("        rg[1] = s")
                w("        rg[3] = loc")
                w(f"    if o{i}.space is sb or o{i}.space is ps:")
                w(f"        o{i}.live = rg")
                w("else:")
                w("    rg[1] = s")
                w("    rg[3] = loc")
            elif oc:
                w(f"occ.touch(t{i}, loc)")
        los, his, vs = [], [], []
        fixed = all(tm is not None for _, _, tm in ops)
        for j, (i, oc, tm) in enumerate(ops):
            if tm is None:          # an operand whose offset the layout leaves free: its pattern now
                w(f"v{j} = (t{i}.offset, t{i}.shape, t{i}.strides) if t{i}._rv is None else t{i}._rv.sched(t{i})")
                w(f"v{j} = core._views.setdefault(v{j}, v{j})")
                w(f"lo{j}, hi{j} = t{i}._ext or t{i}.extent()")
                los.append(f"lo{j}")
                his.append(f"hi{j}")
                vs.append(f"v{j}")
            elif not fixed:
                los.append(const(tm[0]))
                his.append(const(tm[1]))
                vs.append(const(tm[2]))
        if ops:
            tup = lambda xs: "(" + ", ".join(xs) + ",)"  # noqa: E731
            w(f"cols.b += {tup([f'b{i}' for i, _, _ in ops])}")
            if fixed:               # extents and patterns all fixed by the layout: one constant tuple each
                w(f"cols.lo += {const(tuple(tm[0] for _, _, tm in ops))}")
                w(f"cols.hi += {const(tuple(tm[1] for _, _, tm in ops))}")
                w(f"cols.v += {const(tuple(tm[2] for _, _, tm in ops))}")
            else:
                w(f"cols.lo += {tup(los)}")
                w(f"cols.hi += {tup(his)}")
                w(f"cols.v += {tup(vs)}")
        w("occ.seq = s + 1")
        # the instruction's row (record_cols.ROW_FIELDS): one constant tuple of the layout, the same object at
        # every replay
        row = (engine, cost, pre, opcode, flops, nw, len(ops),
               None if dma is None else (dma[0], dma[1], dma[2], _dge_norm(dma[3])))
        w(f"cols.pend.append({const(row)})")
        w("cols.loc.append(loc)")
    return lines
