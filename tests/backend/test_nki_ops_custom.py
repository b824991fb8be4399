"""Custom operators whose implementation calls NKI kernels, on ``neuron`` tensors (issue 21): native dispatch (no CPU
fallback), register_fake, register_autograd with a backward made of kernels, mutates_args, the fake check, and
the ``torch_neuronx`` stand-in's ``nki_op``."""

import gc
import os
import subprocess
import sys
import time

import pytest
import torch

import trnsim
from trnsim.backend import neuronx_standin, nki_bridge
from trnsim.backend.tensor import NeuronTensor

import nki_op_kernels as K  # tests/backend/ is on sys.path (pytest rootdir-relative import)


@torch.library.custom_op("trnsim_test21::square", mutates_args=())
def square(x: torch.Tensor) -> torch.Tensor:
    return K.mul(x, x)


@square.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, g):
    (x,) = ctx.saved_tensors
    return K.mul(g, K.scale(x, 2.0))        # d(x^2)/dx = 2x, made of kernels


square.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("trnsim_test21::add_into", mutates_args=("x",))
def add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    K.add_into(x, y)


@torch.library.custom_op("trnsim_test21::half", mutates_args=())
def half(x: torch.Tensor) -> torch.Tensor:
    return K.wrong_shape(x)


@half.register_fake
def _(x):
    return torch.empty_like(x)               # says [P, F]; the kernel returns [P, F // 2]


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_custom_op_runs_natively_on_neuron_with_its_kernels_timed():
    x = _r(16, 32)
    dx = x.to("neuron")
    with trnsim.profile_torch() as p:
        y = square(dx)
    assert type(y) is NeuronTensor
    assert (y.cpu().double() - x.double() ** 2).abs().max() < 1e-5
    assert trnsim.backend.fallback_counts() == {}
    assert [r.op for r in p.rows] == ["nki::mul"]
    assert all(r.kind != "fallback" for r in p.rows)


def test_register_autograd_backward_made_of_kernels():
    x = _r(16, 32)
    dx = x.to("neuron").requires_grad_()
    with trnsim.profile_torch() as p:
        (square(dx) * 3).sum().backward()
    assert type(dx.grad) is NeuronTensor
    assert (dx.grad.cpu().double() - 6 * x.double()).abs().max() < 1e-5
    assert {"nki::mul", "nki::scale"} <= {r.op for r in p.rows}
    assert trnsim.backend.fallback_counts() == {}


def test_gradcheck_fp32_with_tolerances():
    x = _r(4, 8).to("neuron").requires_grad_()
    with pytest.warns(UserWarning, match="double precision"):
        assert torch.autograd.gradcheck(square, (x,), eps=1e-2, atol=1e-2, rtol=1e-2, fast_mode=False)
    # and a wrong backward is caught by the same check
    bad = _r(4, 8, seed=3).to("neuron").requires_grad_()

    @torch.library.custom_op("trnsim_test21::square_bad_grad", mutates_args=())
    def sq_bad(x: torch.Tensor) -> torch.Tensor:
        return K.mul(x, x)
    sq_bad.register_autograd(lambda ctx, g: K.mul(g, ctx.saved_tensors[0]),        # missing the factor 2
                             setup_context=_setup)
    with pytest.warns(UserWarning, match="double precision"):
        assert not torch.autograd.gradcheck(sq_bad, (bad,), eps=1e-2, atol=1e-2, rtol=1e-2, fast_mode=False,
                                            raise_exception=False)


def test_mutates_args_whole_tensor_and_slice_with_version_counter():
    x = torch.zeros(16, 8).to("neuron")
    v0 = x._version
    add_into(x, torch.ones(16, 8).to("neuron"))
    assert torch.equal(x.cpu(), torch.ones(16, 8)) and x._version > v0
    big = torch.zeros(32, 8).to("neuron")
    add_into(big[4:20], torch.full((16, 8), 2.0).to("neuron"))
    want = torch.zeros(32, 8)
    want[4:20] = 2.0
    assert torch.equal(big.cpu(), want)
    # autograd sees the write: a tensor saved for backward then modified in place is refused
    w = torch.ones(16, 8).to("neuron").requires_grad_()
    h = w * 1.0
    s = (h * h).sum()                  # saves h
    add_into(h, torch.ones(16, 8).to("neuron"))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        s.backward()
    assert trnsim.backend.fallback_counts() == {}


def test_kernel_output_disagreeing_with_the_fake_names_op_and_kernel_line():
    with pytest.raises(RuntimeError) as ei:
        half(_r(16, 8).to("neuron"))
    msg = str(ei.value)
    assert "trnsim_test21::half" in msg and "wrong_shape" in msg
    assert f"{K.__file__}:" in msg and "[16, 4]" in msg and "[16, 8]" in msg
    line = int(msg.split(f"{K.__file__}:")[1].split()[0])
    with open(K.__file__) as f:
        assert f.readlines()[line - 1].strip() == "return out"
    assert torch.equal(square(torch.ones(4, 4).to("neuron")).cpu(), torch.ones(4, 4))   # the device still works


def test_nki_op_on_a_function_and_on_a_kernel():
    @neuronx_standin.nki_op("trnsim_test21::axpb", mutates_args=())
    def axpb(a: torch.Tensor, b: torch.Tensor, s: float) -> torch.Tensor:
        return K.scaled_add(a, b, s)

    @axpb.register_fake
    def _(a, b, s):
        return torch.empty_like(a)
    a, b = _r(8, 16), _r(8, 16, seed=1)
    out = axpb(a.to("neuron"), b.to("neuron"), 0.25)
    assert (out.cpu().double() - (0.25 * a.double() + b.double())).abs().max() < 1e-6

    kop = neuronx_standin.nki_op("trnsim_test21::ksadd", K.scaled_add)   # a kernel: schema and fake inferred
    assert str(kop._opoverload._schema) == "trnsim_test21::ksadd(Tensor a, Tensor b, float scale=2.) -> Tensor"
    assert torch.equal(kop(torch.ones(4, 4).to("neuron"), torch.ones(4, 4).to("neuron")).cpu(),
                       torch.full((4, 4), 3.0))
    inplace = neuronx_standin.nki_op("trnsim_test21::kadd_into", K.add_into, mutates_args=("x",))
    x = torch.zeros(8, 4).to("neuron")
    inplace(x, torch.ones(8, 4).to("neuron"))
    assert torch.equal(x.cpu(), torch.ones(8, 4))
    sm = neuronx_standin.nki_op("trnsim_test21::kmul", K.mul)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        f = sm(torch.empty(8, 4), torch.empty(8, 4))
    assert f.shape == (8, 4) and f.dtype == torch.float32


def test_standin_unknown_names_raise_naming_the_name_and_trnsim():
    with pytest.raises(AttributeError, match=r"torch_neuronx\.trace is not available in trnsim's") as ei:
        neuronx_standin.trace
    assert isinstance(ei.value, neuronx_standin.TrnsimNotProvided)
    with pytest.raises(AttributeError, match="torch_neuronx.no_such_name .*trnsim"):
        neuronx_standin.no_such_name
    for name, state in neuronx_standin.NAMES.items():
        assert state.startswith(("provided", "not provided"))
        if state.startswith("provided"):
            assert getattr(neuronx_standin, name) is not None


def test_import_torch_neuronx_only_under_the_sim_target(tmp_path):
    code = ("import torch_neuronx, torch\n"
            "from torch_neuronx import nki_op\n"
            "print(torch_neuronx.TRNSIM_STANDIN, torch.neuron.is_available())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHNEURON_TARGET", "NKI_SIMULATOR")}
    r = subprocess.run([sys.executable, "-c", code], env=dict(env, TORCHNEURON_TARGET="sim"), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    if r.returncode and "No module named 'torch_neuronx'" in r.stderr:
        pytest.skip("trnsim's start hook is not installed here (not pip-installed)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    r = subprocess.run([sys.executable, "-c", "import torch_neuronx"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "No module named 'torch_neuronx'" in r.stderr


@torch.library.custom_op("trnsim_test21::doubled_rows", mutates_args=())
def doubled_rows(x: torch.Tensor) -> torch.Tensor:
    return K.too_many_partitions(torch.cat([x, x]))       # > 128 partitions: raises inside the kernel


@doubled_rows.register_fake
def _(x):
    return torch.cat([x, x]).clone()


def test_exception_in_a_kernel_during_backward_is_raised_and_the_device_stays_usable():
    from trnsim.backend.memory import MEMORY
    from trnsim.isa.errors import NkiValidationError

    @torch.library.custom_op("trnsim_test21::sq_badbw", mutates_args=())
    def sq_badbw(x: torch.Tensor) -> torch.Tensor:
        return K.mul(x, x)
    sq_badbw.register_autograd(lambda ctx, g: doubled_rows(g)[: g.shape[0]],
                               setup_context=lambda ctx, inputs, output: None)
    x = _r(128, 4).to("neuron").requires_grad_()
    y = sq_badbw(x).sum()
    gc.collect()
    before = MEMORY.allocated
    with pytest.raises(NkiValidationError, match="exceed architecture limitation of 128"):
        y.backward()
    assert x.grad is None
    del y
    # The exception's traceback frames hold the backward's intermediates in a
    # reference cycle, as they would hold CUDA tensors; they are freed when the
    # cycle is collected, which must then return every byte.  The backward ran on autograd's neuron device thread,
    # which may still hold the exception for a moment after this thread re-raised it (the presumed cause of one
    # failure in a full run on a loaded machine: 4096 bytes, the failing kernel's input, still held at the first
    # collect; not reproduced since), so collect again, a bounded number of times, until the bytes come back.
    for _ in range(200):
        gc.collect()
        if MEMORY.allocated <= before:
            break
        time.sleep(0.01)
    assert MEMORY.allocated <= before
    assert torch.equal(square(torch.ones(4, 4).to("neuron")).cpu(), torch.ones(4, 4))
