"""The NKI conformance suite: its record format, its coverage of trnsim's instruction set, that it catches a wrong
instruction (numerics and rules), and a bounded slice that must stay clean (the CI gate)."""

import json

import numpy as np

import trnsim
from conformance import nki_suite

FIELDS = {"suite", "name", "dtype", "mode", "status", "counts", "samples", "detail", "seconds"}


def test_record_format_and_progress():
    calls = []
    recs = nki_suite.run_nki("nisa.memset", ["float32", "int32"], progress=lambda d, t, n: calls.append((d, t, n)))
    json.dumps(recs)
    assert {(r["name"], r["dtype"], r["mode"]) for r in recs} == {
        ("nisa.memset", "float32", "numerics"), ("nisa.memset", "int32", "numerics"), ("nisa.memset", "-", "rule")}
    for r in recs:
        assert set(r) == FIELDS and r["suite"] == "nki"
        assert r["status"] == "pass", r
        assert set(r["counts"]) == {"pass", "mismatch", "error", "skip"}
        assert r["samples"] == sum(r["counts"].values()) > 1
        assert r["detail"] == "" and r["seconds"] >= 0
    assert [c[0] for c in calls] == [1, 2, 3] and all(c[1] == 3 for c in calls)


def test_names_cover_the_instruction_set():
    names = set(nki_suite.list_nki_names())
    for instr in trnsim.isa.INSTRUCTIONS:
        assert f"nisa.{instr}" in names
    for op in ("nl.add", "nl.exp", "nl.bitwise_xor", "nl.softmax", "nl.matmul", "nl.sum", "v1.nl.exp", "v1.nl.add",
               "nl.ndarray"):
        assert op in names


def test_unimplemented_instruction_is_skip_with_reason(monkeypatch):
    # every v2 name is implemented now: a declared-but-unimplemented stub is put in for the check
    from conformance.nki_suite import harness, run
    from trnsim.kernels.stubs import unsupported
    nki_suite.list_nki_names()
    monkeypatch.setattr(harness._M["nisa"], "fake_instr", unsupported("nki.isa.fake_instr"), raising=False)
    found = run._discover_unsupported()
    assert found == {"nisa.fake_instr": "nki.isa.fake_instr is not supported by trnsim yet"}
    monkeypatch.setitem(harness._REG, "nisa.fake_instr", {"skip": found["nisa.fake_instr"]})
    r, = nki_suite.run_nki("nisa.fake_instr")
    assert r["status"] == "skip" and r["counts"]["skip"] == 1
    assert "not supported by trnsim" in r["detail"]


def test_status_is_worst_present():
    rec = nki_suite._record
    assert rec("x", "f", "numerics", {"pass": 3, "mismatch": 1, "error": 1, "skip": 0},
               {"mismatch": "m", "error": "e"}, 0)["status"] == "mismatch"
    r = rec("x", "f", "numerics", {"pass": 3, "mismatch": 0, "error": 1, "skip": 2}, {"error": "e"}, 0)
    assert (r["status"], r["detail"]) == ("error", "e")
    assert rec("x", "f", "numerics", {"pass": 1, "mismatch": 0, "error": 0, "skip": 5}, {}, 0)["status"] == "pass"
    r = rec("x", "f", "numerics", {"pass": 0, "mismatch": 0, "error": 0, "skip": 5}, {"skip": "s"}, 0)
    assert (r["status"], r["detail"]) == ("skip", "s")


def test_planted_off_by_ulps_instruction_is_a_mismatch(monkeypatch):
    """tensor_tensor's add made 3 fp32 ulps too large: within no tolerance the suite allows."""
    import trnsim.isa.ops as ops
    k = np.float32(1 + 3 * 2.0 ** -23)
    monkeypatch.setitem(ops._ALU, "add", lambda a, b: (np.add(a, b) * k).astype(np.float32))
    r, = [r for r in nki_suite.run_nki("nisa.tensor_tensor", ["float32"]) if r["mode"] == "numerics"]
    assert r["status"] == "mismatch", r
    assert r["detail"].startswith("add ") and "worst at" in r["detail"] and "tolerance" in r["detail"]
    assert r["counts"]["pass"] > 0          # only the add cases fail


def test_planted_wrong_op_is_a_mismatch(monkeypatch):
    import trnsim.isa.ops as ops
    monkeypatch.setitem(ops._ACT, "tanh", np.sin)
    recs = nki_suite.run_nki("nl.tanh", ["bfloat16"])
    assert [r["status"] for r in recs] == ["mismatch"]


def test_planted_missing_rule_is_a_mismatch(monkeypatch):
    import trnsim.isa.vector as vector
    monkeypatch.setattr(vector, "BN_STATS_FMAX", 4096)
    r, = [r for r in nki_suite.run_nki("nisa.bn_stats") if r["mode"] == "rule"]
    assert r["status"] == "mismatch" and "no error raised" in r["detail"] and "513" in r["detail"]


# A fixed slice (a few seconds): the instructions kernels use most, every rule group, and the legacy front end.
SLICE = ["nisa.tensor_tensor", "nisa.tensor_scalar", "nisa.activation", "nisa.nc_matmul", "nisa.nc_transpose",
         "nisa.tensor_reduce", "nisa.dma_copy", "nisa.bn_stats", "nl.exp", "nl.softmax", "nl.bitwise_and",
         "v1.nl.add", "v1.nl.gelu"]


def test_bounded_slice_is_clean():
    recs = []
    for pat in SLICE:
        recs += nki_suite.run_nki(pat, ["float32", "bfloat16", "int32"])
    recs += [r for r in nki_suite.run_nki("n*", ["-"]) if r["mode"] == "rule"]   # rule groups have dtype "-"
    bad = [(r["name"], r["dtype"], r["mode"], r["detail"]) for r in recs if r["status"] in ("mismatch", "error")]
    assert not bad, bad
    assert sum(r["samples"] for r in recs) > 300


def test_bitwise_integer_operands_keep_their_bits(nki, nl, nisa):
    """Regression (found by the suite): tensor_scalar's bit-vector immediates went through float32 (rounding
    integers above 2^24) and a negative immediate could not wrap into uint8 (nl.invert raised OverflowError)."""
    x = np.array([[93423208, -5, 7]], np.int32)

    def k(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        r = nl.bitwise_and(t, 0x7FFFFFF7)
        o = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(o, r)
        return o
    np.testing.assert_array_equal(nki.jit(k)(x), x & 0x7FFFFFF7)
    u = np.array([[0, 1, 200, 255]], np.uint8)

    def inv(a):
        t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, a)
        o = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(o, nl.invert(t))
        return o
    np.testing.assert_array_equal(nki.jit(inv)(u), ~u)
