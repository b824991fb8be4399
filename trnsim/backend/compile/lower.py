"""Lowering one aten graph: refuse what cannot be lowered, group the rest into fused kernels, cost each kernel.

The result is a *plan* (plain JSON data, what the compile cache stores): which nodes compute in fp32 on chip, which
are materialised, and the fused kernels with their simulated durations.
"""

from __future__ import annotations

import re

from .. import costs
from ..device_state import STATE
from . import collective, costing
from . import ops as O
from .errors import NeuronCompileError
from .fusion import Fusion

PLAN_FORMAT = 5      # 2: custom ops (nki_op, NKI kernel calls) are lowerable (issue 21); 3: other libraries' ops,
#                      aten.copy and host-side size checks too (issue 28); 4: fp32 matmuls auto-cast (issue 30);
#                      5: collectives in the graph, their exposed time (collective.py, issue 30)

_TORCH_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def user_line(node):
    """``file:line`` of the user's code that produced ``node`` (from the trace's stack), or ''."""
    st = node.meta.get("stack_trace") or ""
    hits = [(f, ln) for f, ln in _TORCH_FRAME.findall(st) if "/torch/" not in f and "/trnsim/" not in f]
    if hits:
        f, ln = hits[-1]
        return f"{f}:{ln}"
    return ""


def unsupported_error(node, graph_name):
    op = O.op_name(node.target)
    qual = str(node.target)
    where = user_line(node)
    loc = f" at {where}" if where else ""
    return NeuronCompileError(
        f"torch.compile(backend='neuron'): aten::{op} ({qual}){loc} cannot be lowered to the neuron device "
        f"(no device kernel for it) in graph {graph_name}. Rewrite that line with supported ops, or set "
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 to run this graph eagerly instead.", op=op, line=where)


def plan_graph(gm, graph_name):
    """The plan of ``gm`` (raises :class:`NeuronCompileError` naming the first op that cannot be lowered)."""
    fz = Fusion(gm)
    if fz.unsupported:
        raise unsupported_error(fz.unsupported[0], graph_name)
    kernels = []
    compute = []
    casts = {}
    odt = None
    durations = {}
    for g in fz.groups:
        ns, fl, nb, est, label = costing.group_cost(fz, g)
        durations[g.id] = float(ns)
        kernels.append({"kind": g.kind, "label": label if len(label) <= 80 else label[:77] + "...",
                        "ns": float(ns), "flops": float(fl), "bytes": int(nb), "estimated": bool(est),
                        "nodes": len(g.nodes)})
        if g.kind in ("pointwise", "rows", "matmul", "reduce"):
            compute += [fz.index[n] for n in g.nodes]
        if g.kind == "matmul" and _fp32_operands(g.anchor):
            odt = odt or costs.compiler_auto_cast() or "float32"
            if odt != "float32":
                casts[str(fz.index[g.anchor])] = odt
    if any(g.kind == "collective" for g in fz.groups):
        # a collective's kernel entry carries its whole time (comm_ns) and, as ns, what the graph leaves exposed
        exposed = collective.schedule(fz, durations)
        for g, k in zip(fz.groups, kernels):
            if g.kind == "collective":
                k["comm_ns"], k["ns"] = k["ns"], float(exposed.get(g.id, 0.0))
    n_ops = sum(1 for n in fz.nodes if n.op == "call_function")
    return {
        "format": PLAN_FORMAT,
        "graph": graph_name,
        "target": STATE.target.name,
        "n_nodes": len(fz.nodes),
        "n_ops": n_ops,
        "compute": sorted(compute),
        "materialised": sorted(fz.index[n] for n in fz.materialised),
        "kernels": [k for k in kernels if k["ns"] or k["bytes"]],
        "operand_casts": casts,       # node index -> the dtype its fp32 operands are cast to (the auto-cast)
    }


def _fp32_operands(mm):
    """Whether a matmul node multiplies fp32 operands (what neuronx-cc's auto-cast applies to)."""
    import torch
    from .fusion import val
    ops = mm.args[1:3] if O.op_name(mm.target) == "addmm" else mm.args[:2]
    vs = [val(a) for a in ops]
    return all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in vs)
