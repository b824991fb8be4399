"""Small NKI kernels (v2 and legacy) the tests of NKI-on-neuron use (tests/backend/test_nki_ops*.py)."""

import trnsim

trnsim.install_nki()

import neuronxcc.nki as nki1  # noqa: E402
import neuronxcc.nki.language as nl1  # noqa: E402
import nki  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402


@nki.jit
def scaled_add(a, b, scale=2.0):
    """scale * a + b for [P <= 128, F] inputs."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(ta, a)
    nisa.dma_copy(tb, b)
    nisa.scalar_tensor_tensor(dst=ta, data=ta, op0=nl.multiply, operand0=float(scale), op1=nl.add, operand1=tb)
    nisa.dma_copy(out, ta)
    return out


@nki.jit
def mul(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    tb = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(ta, a)
    nisa.dma_copy(tb, b)
    nisa.tensor_tensor(ta, ta, tb, op="multiply")
    nisa.dma_copy(out, ta)
    return out


@nki.jit
def scale(a, s):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    nisa.tensor_scalar(t, t, "multiply", float(s))
    nisa.dma_copy(out, t)
    return out


@nki.jit
def add_into(x, y):
    """x += y in place (no output): a kernel writing into its input."""
    tx = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ty = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(tx, x)
    nisa.dma_copy(ty, y)
    nisa.tensor_tensor(tx, tx, ty, op="add")
    nisa.dma_copy(x, tx)


@nki.jit
def wrong_shape(a):
    """Returns [P, F // 2] (a kernel whose output disagrees with a fake that says [P, F])."""
    P, F = a.shape
    out = nl.ndarray((P, F // 2), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F // 2), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a[:, 0:F // 2])
    nisa.dma_copy(out, t)
    return out


@nki.jit
def too_many_partitions(a):
    """Breaks a hardware rule: an SBUF tile of more than 128 partitions."""
    t = nl.ndarray((a.shape[0], a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a)
    return t


@nki.jit
def rows_split(a):
    """``kernel[2]``: program i doubles row block i of ``a`` ([2 * P, F])."""
    R, F = a.shape
    P = R // 2
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, a[i * P:(i + 1) * P, :])
    nisa.tensor_scalar(t, t, "multiply", 2.0)
    nisa.dma_copy(out[i * P:(i + 1) * P, :], t)
    return out


@nki1.jit
def legacy_add(a, b):
    """Legacy (neuronxcc.nki) a + b with nl.load / nl.store."""
    c = nl1.ndarray(a.shape, dtype=a.dtype, buffer=nl1.shared_hbm)
    x = nl1.load(a)
    y = nl1.load(b)
    nl1.store(c, value=nl1.add(x, y))
    return c
