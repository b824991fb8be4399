"""A function compiled with torch.compile's defaults (inductor, which the device hands to the ``neuron`` backend) and
``dynamic=False``, as bitsandbytes compiles its default 4-bit and blockwise kernels, compiles once per input
signature: repeated calls with new values reuse the graph (no recompile from a failing guard, no second compile of
the same graph by the backend), a new shape compiles exactly one more graph, and nothing runs as a CPU fallback."""

import warnings

import torch

from trnsim import backend
from trnsim.backend.compile import stats


def _dequant(codes, absmax, table, blocksize: int):
    """Look up 4-bit codes in a 16-entry table and scale each block by its absmax (a blockwise dequantisation)."""
    vals = table[codes.to(torch.int64)]
    return (vals.reshape(-1, blocksize) * absmax.view(-1, 1)).reshape(-1).to(torch.float16)


def _inputs(n, blocksize, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n,), dtype=torch.uint8, generator=g)
    absmax = torch.rand(n // blocksize, generator=g)
    table = torch.linspace(-1, 1, 16)
    return codes, absmax, table


def _counters():
    from torch._dynamo.utils import counters
    # graphs dynamo captured (a recompile after a failing guard captures another), frames it compiled, AOTAutograd
    # compiles (each hands one graph to the backend)
    return counters["stats"]["unique_graphs"], counters["frames"]["ok"], counters["aot_autograd"]["total"]


def test_repeated_calls_compile_once_and_a_new_shape_once_more(graphs):
    torch._dynamo.reset()
    f = torch.compile(_dequant, dynamic=False)
    n_records = len(stats.RECORDS)
    c0 = _counters()

    def counted():                                  # dynamo's counters since the test started (never reset)
        return tuple(b - a for a, b in zip(c0, _counters()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", backend.NeuronFallbackWarning)
        for seed in range(5):
            codes, absmax, table = _inputs(4096, 64, seed)
            out = f(codes.to("neuron"), absmax.to("neuron"), table.to("neuron"), 64)
            ref = _dequant(codes.double(), absmax.double(), table.double(), 64)
            assert out.device.type == "neuron"
            torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)
        assert counted() == (1, 1, 1)             # one graph, traced and compiled once, no recompile
        assert len(graphs) == 1 and len(stats.RECORDS) == n_records + 1
        codes, absmax, table = _inputs(8192, 64, 9)
        f(codes.to("neuron"), absmax.to("neuron"), table.to("neuron"), 64)
        f(codes.to("neuron"), absmax.to("neuron"), table.to("neuron"), 64)
    assert counted() == (2, 2, 2)                 # the new shape: dynamo's one recompile (static shapes)
    assert len(graphs) == 2 and len(stats.RECORDS) == n_records + 2
    assert not backend.fallback_counts()
    torch._dynamo.reset()
