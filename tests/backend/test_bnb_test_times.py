"""The per-test timing plugin for bitsandbytes' suite (``benchmarks/bnb_test_times.py``, issue 28): the slice it keeps
(per-family strides), the order it runs it in (tests an earlier run passed first), and the table's figures from
two runs' records (per file, per family, per iteration, device-only cases apart)."""

import json
import types

import pytest

btt = pytest.importorskip("benchmarks.bnb_test_times")


def _item(nodeid):
    return types.SimpleNamespace(nodeid=nodeid)


class _Hook:
    def __init__(self):
        self.dropped = []

    def pytest_deselected(self, items):
        self.dropped += items


def _collect(nodeids, monkeypatch, **env):
    for k in ("BNB_TIMES_STRIDE", "BNB_TIMES_FAMILY_STRIDE", "BNB_TIMES_FIRST", "BNB_TEST_DEVICE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    items = [_item(n) for n in nodeids]
    config = types.SimpleNamespace(hook=_Hook())
    btt.pytest_collection_modifyitems(config, items)
    return [i.nodeid for i in items], [i.nodeid for i in config.hook.dropped]


def _ids(fn, n, dev="neuron", file="tests/test_functional.py", cls="TestX::"):
    return [f"{file}::{cls}{fn}[{k}-{dev}]" for k in range(n)]


def test_family_is_file_and_function():
    assert btt._family("tests/test_ops.py::TestA::test_gemv_4bit[x-cpu]") == "test_ops.py::test_gemv_4bit"
    assert btt._family("tests/test_functional.py::test_stable_embedding") == "test_functional.py::test_stable_embedding"


def test_stride_per_family(monkeypatch):
    ids = _ids("test_gemv_4bit", 9) + _ids("test_gemv_4bit", 5, file="tests/test_ops.py") + _ids("test_fp8", 5)
    kept, dropped = _collect(ids, monkeypatch, BNB_TIMES_STRIDE="2",
                             BNB_TIMES_FAMILY_STRIDE="test_functional.py::test_gemv_4bit=4")
    want = [ids[i] for i in (0, 4, 8)] + [ids[9 + i] for i in (0, 2, 4)] + [ids[14 + i] for i in (0, 2, 4)]
    assert kept == want and sorted(dropped) == sorted(set(ids) - set(want))
    # a bare function name applies to that function in every file
    kept, _ = _collect(ids, monkeypatch, BNB_TIMES_FAMILY_STRIDE="test_gemv_4bit=5")
    assert kept == [ids[0], ids[5], ids[9]] + ids[14:]


@pytest.mark.parametrize("spec", ["test_a", "test_a=0", "test_a=x", "=3"])
def test_bad_family_stride_is_named(spec, monkeypatch):
    with pytest.raises(pytest.UsageError, match="BNB_TIMES_FAMILY_STRIDE"):
        _collect(_ids("test_a", 3), monkeypatch, BNB_TIMES_FAMILY_STRIDE=spec)


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def _rec(nodeid, outcome, s):
    return {"nodeid": nodeid, "family": btt._family(nodeid), "outcome": outcome, "cpu_s": s}


def test_shared_tests_run_first(tmp_path, monkeypatch):
    cpu = _ids("test_a", 4, dev="cpu")
    first = _write(tmp_path / "cpu.jsonl", [_rec(cpu[0], "skipped", 0.1), _rec(cpu[1], "passed", 1.0),
                                            _rec(cpu[2], "skipped", 0.1), _rec(cpu[3], "passed", 1.0)])
    ids = _ids("test_a", 4)
    kept, _ = _collect(ids, monkeypatch, BNB_TIMES_FIRST=first, BNB_TEST_DEVICE="neuron")
    assert kept == [ids[1], ids[3], ids[0], ids[2]]


def test_table_figures(tmp_path):
    c = _ids("test_gemv_4bit", 2, dev="cpu") + _ids("test_b", 2, dev="cpu", file="tests/test_ops.py")
    n = _ids("test_gemv_4bit", 2) + _ids("test_b", 2, file="tests/test_ops.py")
    cpu = _write(tmp_path / "c.jsonl", [_rec(c[0], "passed", 1.0), _rec(c[1], "passed", 3.0),
                                        _rec(c[2], "passed", 2.0), _rec(c[3], "skipped", 0.0)])
    dev = _write(tmp_path / "n.jsonl", [_rec(n[0], "passed", 20.0), _rec(n[1], "passed", 40.0),
                                        _rec(n[2], "failed", 9.0), _rec(n[3], "passed", 5.0)])
    lines = btt.table(cpu, dev).splitlines()
    row = next(ln for ln in lines if ln.strip().startswith("test_gemv_4bit")).split()
    # 2 tests, 4 s CPU, 60 s neuron, 15x; per iteration (10 on CPU, 100 on neuron) 1.5x
    assert row[1:] == ["2", "4.00", "60.00", "15.00", "1.50"]
    total = next(ln for ln in lines if ln.startswith("total (passed on both)")).split()
    assert total[-5:] == ["2", "4.00", "60.00", "15.00", "1.50"]
    assert any("passed only on neuron" in ln and "5.00" in ln for ln in lines)
    assert any(ln.startswith(n[2]) and "failed on neuron, passed on cpu" in ln for ln in lines)


NARROWED = '''
import pytest, torch

@pytest.mark.parametrize("device", ["cpu"])
def test_narrowed(device):
    if device == "cpu":
        pytest.skip("narrowed on CPU")
    assert torch.zeros(2, device=device).device.type == "cpu"
    print("RAN", type(device).__name__)
'''


@pytest.mark.parametrize("flag, outcome", [("0", {"skipped": 1}), ("1", {"passed": 1})])
def test_cpu_as_device_takes_the_non_cpu_branch(flag, outcome, pytester, monkeypatch):
    """With the switch a suite's ``device == "cpu"`` narrowing is not taken: the body runs, on the CPU, under the
    same test id."""
    pytest.importorskip("torch")
    for k in ("BNB_TIMES_STRIDE", "BNB_TIMES_FAMILY_STRIDE", "BNB_TIMES_FIRST", "BNB_TIMES_OUT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("BNB_TIMES_CPU_AS_DEVICE", flag)
    pytester.makepyfile(test_user=NARROWED)
    r = pytester.runpytest_inprocess("-p", "benchmarks.bnb_test_times", "-p", "no:cacheprovider", "-s", "-v")
    r.assert_outcomes(**outcome)
    assert "test_narrowed[cpu]" in r.stdout.str()
    if flag == "1":
        assert "RAN device" in r.stdout.str()


def test_cpu_as_device_refuses_other_values(pytester, monkeypatch):
    monkeypatch.setenv("BNB_TIMES_CPU_AS_DEVICE", "yes")
    pytester.makepyfile(test_user=NARROWED)
    r = pytester.runpytest_inprocess("-p", "benchmarks.bnb_test_times", "-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "BNB_TIMES_CPU_AS_DEVICE='yes': must be 0 or 1" in r.stderr.str()
