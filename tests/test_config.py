"""trnsim.config: one parsing rule for every environment switch, read at use time, a scoped override, the
documented table generated from the module, and the start hook's own check accepting the same spellings."""

import os
import re

import pytest

import trnsim.config as config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _environment_decides():
    """Each test starts with no override (other tests' ``set_enabled`` calls leave theirs) and leaves them as found."""
    saved = config.overridden()
    config.reset()
    yield
    config.reset()
    for name, value in saved.items():
        config.set(name, value)
BOOLS = [k for k in config.KNOBS.values() if k.kind == "on/off"]


@pytest.mark.parametrize("knob", BOOLS, ids=lambda k: k.env)
@pytest.mark.parametrize("text,value", [(w, True) for w in ("1", "true", "TRUE", "On", "yes", " YES ")]
                         + [(w, False) for w in ("0", "false", "False", "OFF", "no", " No")])
def test_every_on_off_switch_parses_the_same(monkeypatch, knob, text, value):
    monkeypatch.setenv(knob.env, text)
    assert getattr(config, knob.name) is value


@pytest.mark.parametrize("knob", BOOLS, ids=lambda k: k.env)
def test_a_bad_on_off_value_names_the_variable_and_the_accepted_words(monkeypatch, knob):
    monkeypatch.setenv(knob.env, "maybe")
    with pytest.raises(config.ConfigError) as e:
        getattr(config, knob.name)
    msg = str(e.value)
    assert knob.env in msg and "'maybe'" in msg
    assert all(w in msg for w in config.TRUE_WORDS + config.FALSE_WORDS)


@pytest.mark.parametrize("knob", list(config.KNOBS.values()), ids=lambda k: k.env)
def test_unset_or_empty_gives_the_default(monkeypatch, knob):
    monkeypatch.delenv(knob.env, raising=False)
    assert getattr(config, knob.name) == knob.default
    monkeypatch.setenv(knob.env, "")
    assert getattr(config, knob.name) == knob.default


def test_the_issue_example_off_turns_loop_replay_off(monkeypatch):
    # before: TRNSIM_COST_CACHE=off turned its cache off while TRNSIM_LOOP_REPLAY=off left replay on
    monkeypatch.setenv("TRNSIM_LOOP_REPLAY", "off")
    monkeypatch.setenv("TRNSIM_COST_CACHE", "off")
    from trnsim.backend import cost_cache
    from trnsim.kernels import loop_replay
    assert loop_replay.enabled() is False and cost_cache.enabled() is False


def test_values_are_read_at_use_time(monkeypatch):
    monkeypatch.setenv("TRNSIM_SCHEDULER", "python")
    assert config.scheduler == "python"
    monkeypatch.setenv("TRNSIM_SCHEDULER", "NUMBA")
    assert config.scheduler == "numba"
    monkeypatch.setenv("TRNSIM_SCHEDULER", "fast")
    with pytest.raises(config.ConfigError, match=r"TRNSIM_SCHEDULER='fast': expected one of auto, python, numba"):
        config.scheduler


@pytest.mark.parametrize("env,text,match", [
    ("TRNSIM_NODES", "two", "expected an integer"),
    ("TRNSIM_NODES", "0", "expected an integer >= 1"),
    ("TRNSIM_COMPILE_CACHE_MAX_BYTES", "-1", "expected an integer >= 0"),
    ("TRNSIM_DIST_TIMEOUT", "-5", "seconds > 0"),
    ("TRNSIM_DIST_TIMEOUT", "nan", "seconds > 0"),
    ("TORCHNEURON_FALLBACK", "ignore", "expected one of warn, error"),
])
def test_numbers_and_choices_are_checked(monkeypatch, env, text, match):
    knob = next(k for k in config.KNOBS.values() if k.env == env)
    monkeypatch.setenv(env, text)
    with pytest.raises(config.ConfigError, match=f"{env}=.*{match}"):
        getattr(config, knob.name)


def test_set_and_reset(monkeypatch):
    monkeypatch.setenv("TRNSIM_STRICT_RACES", "yes")
    assert config.set("strict_races", False) is True
    assert config.strict_races is False and config.overridden() == {"strict_races": False}
    config.reset("strict_races")
    assert config.strict_races is True and config.overridden() == {}
    with pytest.raises(config.ConfigError, match="no switch 'races'"):
        config.reset("races")


def test_override_wins_over_the_environment_and_is_restored(monkeypatch):
    monkeypatch.setenv("TRNSIM_LOOP_REPLAY", "1")
    with config.override(loop_replay=False, dist_timeout=3):
        assert config.loop_replay is False and config.dist_timeout == 3.0
        with config.override(loop_replay=True):
            assert config.loop_replay is True
        assert config.loop_replay is False
    assert config.loop_replay is True and config.dist_timeout is None
    with pytest.raises(RuntimeError):
        with config.override(loop_replay=False):
            raise RuntimeError("inside")
    assert config.loop_replay is True


def test_override_checks_names_and_types():
    with pytest.raises(config.ConfigError, match="no switch 'loop_replays'"):
        with config.override(loop_replays=False):
            pass
    with pytest.raises(config.ConfigError, match=r"config.loop_replay: expected True or False, got 'off'"):
        with config.override(loop_replay="off"):
            pass
    with pytest.raises(config.ConfigError, match="expected one of auto, python, numba"):
        with config.override(scheduler="fast"):
            pass
    with pytest.raises(AttributeError, match="no switch 'nope'"):
        config.nope


def test_set_enabled_of_the_speed_layers_goes_through_the_config():
    from trnsim.kernels import issue_cache, loop_replay
    from trnsim.machine import dma_share
    for mod, name in ((issue_cache, "issue_cache"), (loop_replay, "loop_replay"), (dma_share, "dma_round_robin")):
        before = getattr(config, name)
        prev = mod.set_enabled(not before)
        try:
            assert prev is before and mod.enabled() is (not before) and getattr(config, name) is (not before)
        finally:
            config.reset(name)
        assert mod.enabled() is before


def test_the_documented_table_is_the_module():
    with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
        assert f.read() == config.markdown_table(), \
            "docs/configuration.md is stale: run python tools/write_config_doc.py"


def test_no_environment_switch_is_read_outside_the_config():
    # every TRNSIM_/NKI_/TORCHNEURON_/NEURON_ switch the package reads goes through trnsim.config
    pat = re.compile(r"(os\.environ\b|os\.getenv\b)")
    write = re.compile(r"os\.environ\[[^]]+\]\s*=[^=]")      # setting a variable (for a child process) is no read
    allowed = {os.path.join("trnsim", "config.py")}
    offenders = []
    for top in ("trnsim", "conformance"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for fn in files:
                if not fn.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(d, fn), ROOT)
                with open(os.path.join(d, fn)) as f:
                    for i, line in enumerate(f, 1):
                        if pat.search(line) and not write.search(line) and rel not in allowed and \
                                re.search(r"\b(TRNSIM|NKI|TORCHNEURON|NEURON|TORCH_NEURONX)_[A-Z_]+", line):
                            offenders.append(f"{rel}:{i}: {line.strip()}")
    assert offenders == []


def _run_pth(environ):
    """Run the one line of trnsim_nki.pth against ``environ``: whether it calls the hook's install()."""
    with open(os.path.join(ROOT, "trnsim_nki.pth")) as f:
        line = [ln for ln in f.read().splitlines() if ln.strip()][0]
    calls = []
    hook = type("hook", (), {"install": staticmethod(lambda: calls.append(1))})
    fake_os = type("os", (), {"environ": environ})
    b = dict(__builtins__) if isinstance(__builtins__, dict) else dict(vars(__builtins__))
    real_import = b["__import__"]
    b["__import__"] = lambda name, *a, **k: hook if name == "trnsim_nki_hook" else (
        fake_os if name == "os" else real_import(name, *a, **k))
    exec(line, {"__builtins__": b})
    return bool(calls)


@pytest.mark.parametrize("text", ["1", "true", "True", "TRUE", "on", "ON", "yes", "Yes", " 1 ",
                                  "0", "false", "False", "off", "OFF", "no", "NO", ""])
def test_the_start_hook_accepts_the_same_spellings(monkeypatch, text):
    import trnsim_nki_hook
    monkeypatch.setenv("NKI_SIMULATOR", text)
    want = config.nki_simulator
    assert _run_pth({"NKI_SIMULATOR": text}) is want
    assert trnsim_nki_hook.enabled({"NKI_SIMULATOR": text}) is want
    assert trnsim_nki_hook._ON == config.TRUE_WORDS
