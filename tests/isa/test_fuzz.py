"""No crash on bad input: random calls of every instruction end either accepted or in a located
NkiValidationError (bounded here; benchmarks/fuzz_isa.py runs the long campaign)."""

import random
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from trnsim.isa import INSTRUCTIONS, NkiValidationError
from trnsim.isa.fuzz import Fuzzer, HypothesisSource
from trnsim.machine import NeuronCore


def _detail(res):
    lines = [res.report()]
    for k, (kw, tb) in list(res.examples.items())[:3]:
        lines.append(f"{k}\n  {kw}\n{tb}")
    return "\n".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(INSTRUCTIONS)), st.integers(0, 2 ** 32 - 1), st.sampled_from(["trn1", "trn2", "trn3"]))
def test_fuzz_hypothesis(name, seed, target):
    """Hypothesis picks the instruction, the target and the seed of 30 calls (cheap draws; a failure reports all
    three)."""
    fz = Fuzzer(random.Random(seed), lambda: NeuronCore(target, record=False),
                instructions={name: INSTRUCTIONS[name]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fz.run(30)
    assert res.crashes == 0, _detail(res)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_hypothesis_drawn_operands(data):
    """Every choice drawn through hypothesis (slow draws, so a few calls; failures shrink to a minimal call)."""
    fz = Fuzzer(HypothesisSource(data), lambda: NeuronCore("trn2", record=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fz.run(10)
    assert res.crashes == 0, _detail(res)


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzz_seeded_slice(seed):
    """4,000 calls per seed over every instruction; the fuzzer reaches each one and each one accepts some calls."""
    targets = random.Random(seed)
    fz = Fuzzer(random.Random(seed), lambda: NeuronCore(targets.choice(("trn1", "trn2", "trn3")), record=False))
    seen, ok = set(), set()
    for name, fn in list(fz.instructions.items()):
        def spy(*a, _fn=fn, _n=name, **k):
            seen.add(_n)
            _fn(*a, **k)
            ok.add(_n)
        fz.instructions[name] = spy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fz.run(4000)
    assert res.crashes == 0, _detail(res)
    assert res.validation > 0 and res.ok > 0
    assert seen == set(INSTRUCTIONS)
    # activate2 and the MX pair need trn3 and particular operator pairs: not every seed reaches an accepted call
    assert len(ok) >= len(INSTRUCTIONS) - 4, sorted(set(INSTRUCTIONS) - ok)


def test_validation_errors_are_located():
    """A refusal names the instruction, the operand and the user's line."""
    fz = Fuzzer(random.Random(3), lambda: NeuronCore("trn2", record=False))
    core = fz._core()
    t = fz.tensor(core, 128, 8)
    with pytest.raises(NkiValidationError) as ei:
        INSTRUCTIONS["memset"](core, ("k.py", 7), t, "abc")
    e = ei.value
    assert (e.instruction, e.operand, e.value, e.location) == ("memset", "value", "abc", ("k.py", 7))
    assert "[k.py:7]" in str(e)


def test_memset_refuses_values_outside_the_integer_range():
    core = NeuronCore("trn2")
    from trnsim.memory import SBUF, Tensor
    from trnsim.memory.dtypes import DTYPES
    t = Tensor.whole(core.allocate((4, 4), DTYPES["int8"], SBUF, name="t"))
    with pytest.raises(NkiValidationError, match=r"300.*outside the allowed range \[-128, 127\]"):
        INSTRUCTIONS["memset"](core, ("k.py", 1), t, 300)
    INSTRUCTIONS["memset"](core, ("k.py", 1), t, -128)
    assert (t.np == -128).all()
