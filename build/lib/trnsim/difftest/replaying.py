"""Replaying a recording on the simulator: the recorded inputs of a test function or an NKI kernel are run again,
recorded, and compared with what was recorded (for instance on hardware), so a hardware result can be reproduced
and its first divergence found locally.

This is the one part of ``trnsim.difftest`` that imports the simulator (the ``neuron`` backend, or the NKI front
end for kernels): replaying is running on the simulator.
"""

from __future__ import annotations

import importlib
import os
import tempfile

import torch

from .bundle import find_bundles, load_bundle, torch_dtype
from .comparison import compare
from .recorder import Recorder
from .tolerance import Tolerances


def resolve(path: str):
    """``package.module:Qual.name`` -> the object (a function, kernel or class attribute)."""
    if not isinstance(path, str) or ":" not in path:
        raise ValueError(f"{path!r}: give an import path like 'package.module:function'")
    mod, _, qual = path.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _one_bundle(path):
    found = find_bundles(path)
    if len(found) != 1:
        raise ValueError(f"{path}: holds {len(found)} bundles; give one bundle folder (.../<test>/rank<r>)")
    return load_bundle(found[0])


def _logical(bundle, key):
    e = bundle.by_key[key]
    t = bundle.tensor(key)
    if e.get("stored_as") == "view_as_real":
        t = torch.view_as_complex(t.contiguous())
    elif str(t.dtype).replace("torch.", "") != e["dtype"] and hasattr(torch, e["dtype"]):
        t = t.to(torch_dtype(e["dtype"]))
    return t


def _to_numpy(t, dtype_name):
    """A recorded tensor back as the NumPy array the kernel was given (ml_dtypes for bf16/fp8)."""
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2) or dtype_name.startswith("float8"):
        import ml_dtypes
        npdt = getattr(ml_dtypes, dtype_name)
        return t.to(torch.float32).numpy().astype(npdt)
    return t.numpy().copy()


def _device(device):
    if device in (None, "neuron"):
        from trnsim import backend          # the simulated device: replaying is running on the simulator
        backend.register()
        return torch.device("neuron", 0)
    return torch.device(device)


def _args(bundle, spec, device):
    def one(a):
        if "tensor" in a:
            t = _logical(bundle, a["tensor"]).to(device)
            if a.get("requires_grad"):
                t.requires_grad_(True)
            return t
        if "unrecorded" in a:
            raise ValueError(f"replay: argument of type {a['unrecorded']} was not recorded (only tensors and "
                             "JSON values are); pass a wrapper function that builds it")
        return a.get("value")
    return [one(a) for a in spec["args"]], {k: one(a) for k, a in spec["kwargs"].items()}


def replay(bundle_path, fn=None, *, call=0, device=None, out=None, tolerances=None, name=None):
    """Run the ``call``-th recorded function call of a bundle again (``fn``: a callable or import path; default the
    recorded one) on ``device`` (default the simulated ``neuron``) with the recorded inputs, record it with the
    original options into ``out`` (default a temporary folder), and return the
    :class:`~trnsim.difftest.comparison.Comparison` of the recording (A) against the replay (B)."""
    A = _one_bundle(bundle_path)
    calls = A.manifest.get("calls") or []
    if not 0 <= call < len(calls):
        raise ValueError(f"{A.path}: has {len(calls)} recorded calls (rec.call); call={call} does not exist")
    spec = calls[call]
    f = fn if callable(fn) else resolve(fn or spec.get("fn") or "")
    dev = _device(device)
    opts = A.manifest.get("options", {})
    seeds = A.manifest.get("seeds", {})
    seed = seeds.get("given") if seeds.get("given") is not None else seeds.get("torch_initial_seed")
    if seed is not None:
        torch.manual_seed(int(seed))
    out = out or tempfile.mkdtemp(prefix="trnsim-replay-")
    rec = Recorder(out, name or A.name, modules=opts.get("modules", False), backward=opts.get("backward", False),
                   ops=opts.get("ops", False), seed=seed, metadata={"replay_of": os.path.abspath(A.path)})
    args, kwargs = _args(A, spec, dev)
    with rec:
        rec._calls.extend([None] * call)       # keep the call's recorded key prefix (call<k>.)
        rec.call(f, *args, **kwargs)
        del rec._calls[:call]
    return compare(A.path, rec.path, tolerances or Tolerances(), subset=True)


def replay_kernel(bundle_path, kernel=None, *, call=0, out=None, tolerances=None, target=None):
    """Run the ``call``-th recorded NKI kernel launch of a bundle on the simulator (``kernel``: the kernel or its
    import path; default the recorded one) and compare its outputs with the recorded ones."""
    A = _one_bundle(bundle_path)
    calls = A.manifest.get("kernel_calls") or []
    if not 0 <= call < len(calls):
        raise ValueError(f"{A.path}: has {len(calls)} recorded kernel launches; call={call} does not exist")
    spec = calls[call]
    k = kernel if (kernel is not None and not isinstance(kernel, str)) else resolve(kernel or spec.get("fn") or "")
    from trnsim.kernels import simulate    # the simulator's NKI front end
    from trnsim.kernels import hooks  # noqa: F401  (so the recorder observes the launch)

    def arg(a):
        if "tensor" in a:
            t = _logical(A, a["tensor"])
            return _to_numpy(t, A.by_key[a["tensor"]]["dtype"]) if a.get("numpy") else t
        if "unrecorded" in a:
            raise ValueError(f"replay_kernel: argument {a['param']!r} ({a['unrecorded']}) was not recorded")
        return a.get("value")
    args = [arg(a) for a in spec["args"]]
    kwargs = {p: arg(a) for p, a in spec["kwargs"].items()}
    out = out or tempfile.mkdtemp(prefix="trnsim-replay-")
    rec = Recorder(out, A.name, kernels=True, metadata={"replay_of": os.path.abspath(A.path)})
    with rec:
        rec._counts[("kernel", spec["name"])] = spec["index"]      # record under the same launch number
        simulate(k, target=target)(*args, **kwargs)
    base = f"kernel/{spec['name']}#{spec['index']}/*"
    return compare(A.path, rec.path, tolerances or Tolerances(), include=[base])
