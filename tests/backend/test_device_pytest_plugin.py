"""The pytest plugin, tested with pytester: a user test file that knows nothing of trnsim.

Runs under the sim target go to a subprocess: pytester's in-process mode restores ``sys.modules`` afterwards, and
torch modules first imported inside the inner run cannot be imported a second time (TORCH_LIBRARY registrations)."""

USER_TESTS = '''
import torch


def test_default_device_and_an_unsupported_op():
    x = torch.ones(4) * 0.5
    assert x.device.type == "neuron"
    v = x.reshape(2, 2)
    y = torch._weight_norm(v, v[:, :1], 0)        # aten::_weight_norm_interface: a CPU fallback
    assert all(abs(t - 0.5 ** 2 / 0.5 ** 0.5) < 1e-6 for t in y.reshape(-1).tolist())


def test_fixture_matmul(neuron_device):
    a = torch.randn(128, 128, device=neuron_device)
    assert (a @ a).device.type == "neuron"
'''


def test_plugin_default_device_summary_and_header(pytester, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_TARGET", "sim")
    pytester.makepyfile(test_user=USER_TESTS)
    r = pytester.runpytest_subprocess("--neuron-default-device", "-p", "no:cacheprovider", "-W",
                                      "ignore::UserWarning")
    r.assert_outcomes(passed=2)
    out = r.stdout.str()
    assert "trnsim 0.1.0: simulated Trainium2 (trn2), LNC=2, PyTorch device neuron:0" in out
    lines = r.stdout.lines
    i = next(k for k, ln in enumerate(lines) if "simulated neuron device time per test" in ln)
    timed = [ln for ln in lines[i + 1:i + 3] if " us  " in ln]
    assert len(timed) == 2 and {t.split()[-1] for t in timed} == {
        "test_user.py::test_default_device_and_an_unsupported_op", "test_user.py::test_fixture_matmul"}
    us = [float(t.split()[0]) for t in timed]
    assert us == sorted(us, reverse=True) and us[-1] > 0            # slowest first
    j = next(k for k, ln in enumerate(lines) if "ops that fell back to the CPU" in ln)
    assert lines[j + 1].split() == ["1", "aten::_weight_norm_interface"]


def test_plugin_strict_makes_fallback_an_error(pytester, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_TARGET", "sim")
    pytester.makepyfile(test_user=USER_TESTS)
    r = pytester.runpytest_subprocess("--neuron-default-device", "--neuron-strict", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=1, failed=1)
    assert "NeuronFallbackError: aten::_weight_norm_interface is not implemented" in r.stdout.str()


def test_plugin_is_inert_without_sim(pytester, monkeypatch):
    monkeypatch.delenv("TORCHNEURON_TARGET", raising=False)
    pytester.makepyfile(test_user="def test_x(neuron_device):\n    pass\n")
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    r.assert_outcomes(skipped=1)
    assert "simulated Trainium" not in r.stdout.str() and "simulated neuron device time" not in r.stdout.str()
