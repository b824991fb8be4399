"""Device classes (``nn.Parameter`` subclasses on ``neuron``, backend.params) take the same paths as plain neuron
tensors everywhere the backend checks for device data: NKI kernels called with them (nki_bridge), custom ops with
no rule of their own, and the ``neuron`` process group's collectives (distributed)."""

import datetime

import pytest
import torch
import torch.distributed as dist
from torch import nn

import trnsim
from trnsim.backend import nki_bridge
from trnsim.backend.tensor import DEVICE_TYPES, NeuronTensor

import nki_op_kernels as K  # tests/backend/ is on sys.path (pytest rootdir-relative import)


class Scaled(nn.Parameter):
    """A Parameter subclass with an attribute, as quantisation libraries write them."""

    def __new__(cls, data=None, requires_grad=False, scale=1.0):
        obj = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        obj.scale = scale
        return obj


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _on_device(t, scale=0.5):
    p = Scaled(t.to("neuron"), scale=scale)
    assert type(p) in DEVICE_TYPES and type(p) is not NeuronTensor and isinstance(p, Scaled)
    return p


def test_nki_kernel_reads_a_parameter_subclass_from_device_storage():
    nki_bridge.cache_clear()
    trnsim.backend.reset_fallback_counts()
    a, b = _r(128, 64), _r(128, 64, seed=1)
    pa = _on_device(a)
    out = K.scaled_add(pa, b.to("neuron"), 3.0)
    assert type(out) is NeuronTensor
    ref = 3.0 * a.double() + b.double()
    assert (out.cpu().double() - ref).abs().max() < 1e-5
    assert trnsim.backend.fallback_counts() == {}
    assert pa.scale == 0.5


def test_custom_op_implementation_runs_with_a_parameter_subclass():
    calls = []

    @torch.library.custom_op("trnsim_test_dc::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        calls.append(type(x))
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    x = _r(4, 4)
    y = twice(_on_device(x))
    assert y.device.type == "neuron"
    assert torch.equal(y.cpu(), x * 2)
    # the op's own implementation ran with device tensors (no CPU fallback of the whole op)
    assert calls and all(c in DEVICE_TYPES for c in calls)


@pytest.fixture
def world1():
    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_collective_on_a_parameter_subclass_is_a_device_collective(world1):
    p = _on_device(torch.arange(8.0))
    with trnsim.profile_torch() as prof:
        dist.all_reduce(p, op=dist.ReduceOp.SUM)
    assert [r.op for r in prof.rows if r.kind == "collective"] == ["c10d::all_reduce"]
    assert torch.equal(p.cpu(), torch.arange(8.0))
    assert isinstance(p, Scaled) and p.scale == 0.5
