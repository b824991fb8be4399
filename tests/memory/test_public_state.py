"""The memory layer's public doors used by the loop replay: the allocator's state, reading and advancing the buffer
id counter; and the core's (recording, interned access patterns) and the issue cache's replay count."""

import pytest

from trnsim.memory import SBUF, Buffer, MemorySpace, next_buffer_id, skip_buffer_ids
from trnsim.memory.dtypes import dtype_of


def _buf():
    return Buffer(None, dtype_of("float32"), (4, 8), execute=False)


def test_next_buffer_id_reads_without_taking():
    a = next_buffer_id()
    assert next_buffer_id() == a
    b = _buf()
    assert b.id == a and next_buffer_id() == a + 1


def test_skip_buffer_ids_advances_as_made_buffers_would():
    a = next_buffer_id()
    skip_buffer_ids(5)
    assert next_buffer_id() == a + 5 and _buf().id == a + 5
    skip_buffer_ids(0)
    assert next_buffer_id() == a + 6
    with pytest.raises(ValueError, match="n=-1 must be >= 0"):
        skip_buffer_ids(-1)
    assert next_buffer_id() == a + 6


def test_state_is_the_whole_allocator_state():
    sp = MemorySpace(SBUF, 1024, 128, align=4)
    s0 = sp.state()
    assert s0 == (((0, 1024),), 0, 0)
    x = sp.allocate(100)
    y = sp.allocate(200)
    assert sp.state() == (((300, 724),), 300, 300)
    sp.release(x, 100)
    assert sp.state() == (((0, 100), (300, 724)), 200, 300)
    hash(sp.state())
    sp.release(y, 200)
    assert sp.state()[:2] == (((0, 1024),), 0)


def test_core_recording_and_interned_patterns():
    from trnsim.machine import NeuronCore
    core = NeuronCore("trn2", execute=False)
    assert core.recording is True
    assert NeuronCore("trn2", execute=False, record=False).recording is False
    n = core.interned_patterns
    v = (0, (4, 8), (8, 1))
    first = core.intern_pattern(v)
    assert first is v and core.interned_patterns == n + 1
    again = core.intern_pattern((0, (4, 8), (8, 1)))
    assert again is v and core.interned_patterns == n + 1


def test_count_replays_makes_the_code_at_gen_after():
    from trnsim.kernels import issue_cache as ic
    prog = ic._Prog(())
    made = []
    prog._generate = lambda: made.append(1) or "generated"
    prog.count_replays(ic.GEN_AFTER - 2)
    assert prog.n == ic.GEN_AFTER - 2 and prog.run == prog._warm and not made
    prog.count_replays(5)
    assert prog.n == ic.GEN_AFTER and prog.run == "generated" and made == [1]
    prog.count_replays(3)           # already generated: nothing more
    assert prog.n == ic.GEN_AFTER and made == [1]
