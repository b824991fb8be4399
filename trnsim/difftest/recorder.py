"""Recording a test's tensors into a bundle: ``with record(dir, name=...) as rec:``.

What is captured, each in execution order with a sequence number:

- ``input/<name>`` and ``output/<name>``: what the test hands to :meth:`Recorder.input`/:meth:`Recorder.output`
  (or :meth:`Recorder.call`, which also remembers the function so the bundle can be replayed);
- ``module/<path>``: every ``nn.Module``'s forward output (``modules=True``), ``<path>`` the module's dotted name
  in the outermost module called (``blocks.1.up``), ``(root)`` for that module itself, ``@k`` for its k-th call;
- ``grad/<path>/grad_input.<i>``: every module's gradients with respect to its inputs (``backward=True``);
- ``op/<phase>/<path>/<aten op>#<k>``: every op's outputs (``ops=True``, or a list of glob patterns on op names such
  as ``["aten.addmm*"]``) through a ``TorchDispatchMode``, ``<phase>`` ``forward`` or ``backward`` and ``<path>`` the
  innermost module running (in backward: the last module whose gradient computation began); views, ``empty``,
  copies between devices and collectives are not recorded (their values are not computed there or are not ready);
- ``kernel/<name>#<k>/in.<param>`` and ``out.<i>``: NKI kernel launches (``kernels=True``): automatically for kernels
  simulated by trnsim, and through :meth:`Recorder.kernel` for any kernel (on hardware too).

The bundle goes to ``DIR/<name>/rank<r>/`` (``r`` the torch.distributed rank).  Recording imports nothing of trnsim's
simulator: it runs unchanged on a Trainium instance and on CPU.
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import os
import sys
import threading
import time
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import config
from . import bundle as _bundle
from .capture import host_tensor, leaves
from .device import device_kind, dist_rank, hardware_target, simulated_target, versions

DEFAULT_RECORD_MAX_BYTES = 2 << 30     # host memory a recording may hold before it stops with an error
_SKIP_OPS = {"aten.detach.default", "aten._to_copy.default", "aten.copy_.default", "aten.lift_fresh.default",
             "aten.lift_fresh_copy.default", "aten.empty.memory_format", "aten.empty_like.default",
             "aten.empty_strided.default", "aten.new_empty.default", "aten.new_empty_strided.default",
             "aten.empty_permuted.default", "aten._copy_from.default", "aten._copy_from_and_resize.default",
             "aten.set_.source_Storage_storage_offset", "aten.resize_.default"}
_SKIP_NAMESPACES = {"c10d", "_c10d_functional", "_c10d_functional_autograd", "profiler", "_dtensor"}


class RecordingError(RuntimeError):
    """Recording could not be completed (too much data, a value that cannot be recorded, ...)."""


def _fn_path(fn):
    mod = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not mod or not qual or "<locals>" in qual:
        return None
    return f"{mod}:{qual}"


def _json_value(v):
    """``v`` if it survives JSON unchanged (numbers, strings, booleans, None, lists/dicts of them), else ``None``."""
    try:
        return v if json.loads(json.dumps(v)) == v else None
    except (TypeError, ValueError):
        return None


class _OpMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls):
        # TorchDispatchMode wraps __torch_dispatch__ in torch._dynamo.disable by default, which imports dynamo
        # (seconds) on the first op; op recording is for eager runs, so the wrapper is not wanted (torch 2.13)
        return False

    def __init__(self, rec):
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        rec = self.rec
        if not rec._quiet() and rec._failure is None:
            try:       # never raise here: inside autograd's engine an exception would abort the process
                rec._on_op(func, out)
            except BaseException as e:          # noqa: BLE001  (re-raised when the recording closes)
                rec._failure = e
        return out


class Recorder:
    """One recording (one test, one rank).  Use through :func:`record`."""

    def __init__(self, root, name, *, modules=False, backward=False, ops=False, kernels=True, model=None,
                 fmt="safetensors", max_bytes=DEFAULT_RECORD_MAX_BYTES, seed=None, nodeid=None, metadata=None):
        if fmt not in ("safetensors", "npz"):
            raise ValueError(f"record(fmt={fmt!r}): expected 'safetensors' or 'npz'")
        self.root = os.fspath(root)
        self.name = str(name)
        self.modules = modules
        self.backward = backward
        self.ops = ops
        self.kernels = kernels
        self.model = model
        self.fmt = fmt
        self.max_bytes = int(max_bytes)
        self.seed = seed
        self.nodeid = nodeid
        self.metadata = dict(metadata or {})
        self.path = None                        # the bundle folder, known once written
        self.entries = []
        self._tensors = {}
        self._bytes = 0
        self._seq = 0
        self._kinds = set()
        self._calls = []
        self._kernel_calls = []
        self._counts = {}
        self._failure = None
        self._tls = threading.local()
        self._handles = []
        self._mode = None
        self._kernel_obs = None
        self._warn_ctx = None
        self._names = {}                        # id(module) -> dotted path in the outermost module
        self._last_path = {}                    # id(module) -> path of its latest call
        self._bwd_path = ""
        self._t0 = None
        self._seed0 = None
        self.active = False

    # -- the thread's own state ----------------------------------------------------------------------
    def _quiet(self):
        return getattr(self._tls, "quiet", 0) > 0

    def _stack(self):
        s = getattr(self._tls, "stack", None)
        if s is None:
            s = self._tls.stack = []
        return s

    class _Quiet:
        def __init__(self, rec):
            self.rec = rec

        def __enter__(self):
            self.rec._tls.quiet = getattr(self.rec._tls, "quiet", 0) + 1

        def __exit__(self, *exc):
            self.rec._tls.quiet -= 1

    # -- storing ---------------------------------------------------------------------------------------
    def _count(self, key):
        k = self._counts.get(key, 0)
        self._counts[key] = k + 1
        return k

    def _add(self, key, kind, value, **meta):
        with Recorder._Quiet(self):
            got = host_tensor(value)
        if got is None:
            return None
        h, logical, dev, notes = got
        if key in self._tensors:
            raise RecordingError(f"recording {self.name!r}: {key!r} recorded twice (give each input/output its "
                                 "own name)")
        nbytes = h.numel() * h.element_size()
        if self._bytes + nbytes > self.max_bytes:
            raise RecordingError(
                f"recording {self.name!r}: {key!r} ({list(h.shape)} {logical}, {nbytes:,} bytes) would bring the "
                f"recording to {self._bytes + nbytes:,} bytes, over max_bytes={self.max_bytes:,}; record fewer "
                "tensors (ops=['aten.mm*', ...], modules=False) or raise max_bytes")
        self._bytes += nbytes
        kind_dev = "neuron-sim" if meta.pop("_sim_kernel", False) else (device_kind(dev) if dev != "host" else None)
        if kind_dev:
            self._kinds.add(kind_dev)
        e = {"key": key, "kind": kind, "seq": self._seq, "dtype": logical, "shape": list(value.shape),
             "stored_dtype": _bundle.dtype_name(h.dtype), "stored_shape": list(h.shape),
             "sha256": _bundle.sha256(_bundle.tensor_bytes(h)), "store": key,
             "device": dev if dev != "host" else "host (NumPy)"}
        e.update({k: v for k, v in meta.items() if v is not None})
        e.update(notes)
        if self.fmt == "npz":
            e["store"] = f"t{self._seq}"
        self._seq += 1
        self.entries.append(e)
        self._tensors[e["store"]] = h
        return e

    def _add_tree(self, prefix, kind, value, **meta):
        for name, t in leaves(prefix, value):
            self._add(name, kind, t, **meta)

    # -- what tests call -----------------------------------------------------------------------------
    def input(self, name, value):
        """Record ``value`` (a tensor, array or nested structure of them) as input ``name``; returns ``value``."""
        if self.active:
            self._guard(lambda: self._add_tree(f"input/{name}", "input", value))
        return value

    def output(self, name, value):
        """Record ``value`` as output ``name``; returns ``value``."""
        if self.active:
            self._guard(lambda: self._add_tree(f"output/{name}", "output", value))
        return value

    def inputs(self, **values):
        for k, v in values.items():
            self.input(k, v)

    def outputs(self, **values):
        for k, v in values.items():
            self.output(k, v)

    def state(self, model, grads=True, prefix="param"):
        """Record every parameter of ``model`` (and its gradient, if it has one) as outputs."""
        for n, p in model.named_parameters():
            self.output(f"{prefix}/{n}", p)
            if grads and p.grad is not None:
                self.output(f"{prefix}.grad/{n}", p.grad)

    def call(self, fn, *args, **kwargs):
        """Run ``fn(*args, **kwargs)`` recording its tensor arguments as inputs and its result as output ``out``;
        the function's import path is kept so that :func:`trnsim.difftest.replay` can run it again."""
        if not self.active:
            return fn(*args, **kwargs)
        k = len(self._calls)
        pre = f"call{k}." if k else ""
        spec = {"fn": _fn_path(fn), "args": [], "kwargs": {}}
        for i, a in enumerate(args):
            spec["args"].append(self._arg_spec(f"input/{pre}arg{i}", a))
        for n, v in kwargs.items():
            spec["kwargs"][n] = self._arg_spec(f"input/{pre}{n}", v)
        out = fn(*args, **kwargs)
        self.output(f"{pre}out", out)
        spec["output"] = f"output/{pre}out"
        self._calls.append(spec)
        return out

    def _arg_spec(self, key, v):
        if isinstance(v, torch.Tensor) or type(v).__module__ == "numpy":
            if hasattr(v, "shape"):
                self._guard(lambda: self._add(key, "input", v))
                return {"tensor": key, "requires_grad": bool(getattr(v, "requires_grad", False))}
        jv = _json_value(v)
        return {"value": jv} if jv is not None or v is None else {"unrecorded": type(v).__name__}

    def kernel(self, kernel, *args, **kwargs):
        """Call an NKI kernel and record its inputs and outputs (works with any ``nki.jit`` kernel: trnsim's, or
        the real one on a Trainium instance)."""
        if not self.active:
            return kernel(*args, **kwargs)
        fn = getattr(kernel, "fn", None) or getattr(kernel, "func", None) or kernel
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        self._tls.in_kernel = getattr(self._tls, "in_kernel", 0) + 1
        try:
            out = kernel(*args, **kwargs)
        finally:
            self._tls.in_kernel -= 1
        sim = type(kernel).__module__.startswith("trnsim.")
        self._guard(lambda: self._on_kernel(fn, args, kwargs, params, out, sim=sim))
        return out

    def _guard(self, f):
        if self._failure is not None:
            return
        try:
            f()
        except RecordingError as e:
            self._failure = e
            raise

    # -- hooks -----------------------------------------------------------------------------------------
    def _path_of(self, module):
        st = self._stack()
        if self.model is not None and not self._names:
            self._names = {id(m): n for n, m in self.model.named_modules()}
        if not st and self.model is None:
            self._names = {id(m): n for n, m in module.named_modules()}
        n = self._names.get(id(module))
        if n is None:
            n = (st[-1] + "." if st and st[-1] != "(root)" else "") + type(module).__name__
        return n or "(root)"

    def _fwd_pre(self, module, args):
        if self._quiet():
            return
        p = self._path_of(module)
        k = self._count(("call", p))
        p_call = p if k == 0 else f"{p}@{k}"
        self._stack().append(p_call)
        self._last_path[id(module)] = p_call

    def _fwd_post(self, module, args, output):
        if self._quiet():
            return
        st = self._stack()
        if not st:
            return
        p = st.pop()
        if self.modules and self._failure is None and output is not None:
            try:
                self._add_tree(f"module/{p}", "module", output, path=p, module_class=type(module).__name__,
                               phase="forward")
            except BaseException as e:      # noqa: BLE001
                self._failure = e

    def _bwd_pre(self, module, grad_output):
        self._bwd_path = self._last_path.get(id(module), type(module).__name__)

    def _bwd_post(self, module, grad_input, grad_output):
        if self._failure is not None or self._quiet():
            return
        p = self._last_path.get(id(module), type(module).__name__)
        try:
            for i, g in enumerate(grad_input):
                if isinstance(g, torch.Tensor):
                    self._add(f"grad/{p}/grad_input.{i}", "grad", g, path=p, module_class=type(module).__name__,
                              phase="backward")
        except BaseException as e:          # noqa: BLE001
            self._failure = e

    def _want_op(self, name):
        if self.ops is True:
            return True
        return any(fnmatch.fnmatchcase(name, pat) for pat in self.ops)

    def _on_op(self, func, out):
        name = str(func)
        if name in _SKIP_OPS or func.namespace in _SKIP_NAMESPACES or func.is_view or not self._want_op(name):
            return
        backward = torch._C._current_autograd_node() is not None
        phase = "backward" if backward else "forward"
        if backward:
            path = self._bwd_path or "(root)"
        else:
            st = self._stack()
            path = st[-1] if st else "(root)"
        k = self._count(("op", phase, path, name))
        base = f"op/{phase}/{path}/{name}#{k}"
        items = leaves("", out)
        for sub, t in items:
            self._add(base if len(items) == 1 else f"{base}.{sub}", "op", t, path=path, op=name, phase=phase)

    def _on_kernel(self, fn, args, kwargs, params, outputs, sim=False):
        name = getattr(fn, "__name__", "kernel")
        k = self._count(("kernel", name))
        base = f"kernel/{name}#{k}"
        spec = {"name": name, "index": k, "fn": _fn_path(fn), "args": [], "kwargs": {}, "simulated": sim}
        for i, a in enumerate(args):
            pn = params[i] if i < len(params) else f"arg{i}"
            spec["args"].append(self._kernel_arg(f"{base}/in.{pn}", a, sim, pn))
        for pn, v in kwargs.items():
            spec["kwargs"][pn] = self._kernel_arg(f"{base}/in.{pn}", v, sim, pn)
        spec["outputs"] = []
        for sub, t in leaves("", outputs):
            key = f"{base}/out" + (f".{sub}" if sub else "")
            self._add(key, "kernel_output", t, path=name, op=f"kernel {name}", phase="kernel", _sim_kernel=sim)
            spec["outputs"].append(key)
        self._kernel_calls.append(spec)

    def _kernel_arg(self, key, v, sim, param):
        if hasattr(v, "shape") and (isinstance(v, torch.Tensor) or type(v).__module__ == "numpy"):
            self._add(key, "kernel_input", v, path=key.split("/")[1], op="kernel input", phase="kernel",
                      param=param, _sim_kernel=sim)
            return {"param": param, "tensor": key, "numpy": not isinstance(v, torch.Tensor)}
        jv = _json_value(v)
        return {"param": param, "value": jv} if jv is not None or v is None else \
            {"param": param, "unrecorded": type(v).__name__}

    def _kernel_observer(self, fn, args, kwargs, params, outputs):
        if not self.active or getattr(self._tls, "in_kernel", 0) or self._failure is not None:
            return
        try:
            self._on_kernel(fn, args, kwargs, params, outputs, sim=True)
        except BaseException as e:          # noqa: BLE001
            self._failure = e

    # -- entering and leaving --------------------------------------------------------------------------
    def __enter__(self):
        from torch.nn.modules import module as M
        self._t0 = time.time()
        self._seed0 = torch.initial_seed()
        self.active = True
        if self.modules or self.ops or self.backward:
            self._handles.append(M.register_module_forward_pre_hook(self._fwd_pre))
            self._handles.append(M.register_module_forward_hook(self._fwd_post, always_call=True))
        if self.backward:
            # torch warns for each module whose inputs need no gradient (an embedding's indices): expected here
            self._warn_ctx = warnings.catch_warnings()
            self._warn_ctx.__enter__()
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            self._handles.append(M.register_module_full_backward_pre_hook(self._bwd_pre))
            self._handles.append(M.register_module_full_backward_hook(self._bwd_post))
        if self.kernels:
            hooks = sys.modules.get("trnsim.kernels.hooks")    # loaded only where trnsim simulates kernels
            if hooks is None and config.torchneuron_target == "sim":
                import importlib
                hooks = importlib.import_module("trnsim.kernels.hooks")    # the simulated target: load it now
            if hooks is not None:
                self._kernel_obs = hooks.add_launch_observer(self._kernel_observer)
        if self.ops:
            self._mode = _OpMode(self)
            self._mode.__enter__()
        return self

    def _detach_hooks(self):
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._warn_ctx is not None:
            self._warn_ctx.__exit__(None, None, None)
            self._warn_ctx = None
        if self._kernel_obs is not None:
            hooks = sys.modules.get("trnsim.kernels.hooks")
            if hooks is not None:
                hooks.remove_launch_observer(self._kernel_obs)
            self._kernel_obs = None

    def __exit__(self, exc_type, exc, tb):
        self._detach_hooks()
        self.active = False
        if self._failure is not None:
            f = self._failure
            if isinstance(f, RecordingError):
                if exc is f:
                    return False
                raise f
            raise RecordingError(f"recording {self.name!r} failed: {type(f).__name__}: {f}") from f
        self.write(error=None if exc is None else f"{exc_type.__name__}: {exc}")
        return False

    def manifest(self, error=None):
        rank, world = dist_rank()
        kinds = sorted(self._kinds - {"cpu"}) or sorted(self._kinds) or ["cpu"]
        kind = "+".join(kinds)
        target = simulated_target() if "neuron-sim" in kinds else (
            hardware_target() if any(k.startswith("neuron") for k in kinds) else None)
        return {
            "name": self.name, "nodeid": self.nodeid, "rank": rank, "world_size": world,
            "device_kind": kind, "devices_seen": sorted(self._kinds), "target": target,
            "versions": versions(), "seeds": {"torch_initial_seed": self._seed0, "given": self.seed},
            "created_unix": self._t0, "duration_s": time.time() - (self._t0 or time.time()),
            "options": {"modules": bool(self.modules), "backward": bool(self.backward),
                        "ops": self.ops if isinstance(self.ops, bool) else list(self.ops)},
            "calls": self._calls, "kernel_calls": self._kernel_calls, "error": error,
            "metadata": self.metadata, "entries": self.entries,
        }

    def write(self, error=None):
        rank, _ = dist_rank()
        self.path = os.path.join(self.root, _bundle.safe_dirname(self.name), f"rank{rank}")
        old = os.path.join(self.path, _bundle.MANIFEST)
        if os.path.exists(old):        # two names that map to one folder must not overwrite each other
            try:
                with open(old) as f:
                    other = json.load(f).get("name")
            except (OSError, ValueError):
                other = None
            if other is not None and other != self.name:
                raise RecordingError(f"recording {self.name!r}: {self.path} already holds the recording of "
                                     f"{other!r} (both names map to this folder); give another name or folder")
        _bundle.write_bundle(self.path, self.manifest(error), self._tensors, self.fmt)
        return self.path


def record(root, name="test", **options) -> Recorder:
    """``with record(dir, name="test_x", modules=True, ops=True) as rec:`` records into ``dir/<name>/rank<r>/``.

    Options: ``modules`` (every module's forward output), ``backward`` (module input gradients; adds autograd
    hooks to every module), ``ops`` (True or glob patterns on aten op names), ``kernels`` (NKI launches, default
    True), ``model`` (name module paths from this model), ``fmt`` ('safetensors' or 'npz'), ``max_bytes``,
    ``seed`` (noted in the manifest), ``metadata`` (a JSON-able dict kept in the manifest)."""
    return Recorder(root, name, **options)


def record_kernels(root, name="kernels", **options) -> Recorder:
    """Record every NKI kernel launch simulated by trnsim (``nki.simulate``, ``trnsim.profile``, calls of
    ``@nki.jit`` kernels) in the block, plus any made through ``rec.kernel(k, *args)`` (which also works on
    hardware)."""
    options.setdefault("kernels", True)
    return Recorder(root, name, **options)
