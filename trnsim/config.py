"""Every switch trnsim reads from the environment, in one place.

Each switch is a typed attribute of this module with its environment variable, default and meaning::

    import trnsim.config as config
    if config.loop_replay: ...                     # read at use time: tests may change the environment
    with config.override(loop_replay=False): ...   # a scoped override (tests), restored on exit

Values are read from the environment each time they are asked for (an override set with :func:`override` or
:func:`set` wins over the environment).  One parsing rule for every switch of a kind:

- on/off switches accept ``1``/``0``, ``true``/``false``, ``on``/``off``, ``yes``/``no`` (any case, surrounding
  blanks ignored); anything else raises :class:`ConfigError` naming the variable, its value and what is accepted;
- a variable set to the empty string counts as unset (its default);
- numbers must parse as such and lie in the switch's range; choices must be one of the listed values.

``python tools/write_config_doc.py`` writes the table of every switch (:func:`markdown_table`) to
docs/configuration.md, and a test checks the two agree.

Imports nothing of trnsim, so every layer may use it.  The interpreter start hook (``trnsim_nki.pth``) keeps its
own copy of the on/off spellings (it must not import anything heavy); a test checks it accepts the same ones.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

__all__ = ["ConfigError", "Knob", "KNOBS", "TRUE_WORDS", "FALSE_WORDS", "parse_bool", "override", "set", "reset",
           "overridden", "markdown_table"]

TRUE_WORDS = ("1", "true", "on", "yes")
FALSE_WORDS = ("0", "false", "off", "no")


class ConfigError(ValueError):
    """An environment switch holds a value trnsim cannot use: names the variable, the value and what is accepted."""


def parse_bool(env: str, text: str) -> bool:
    """``text`` (the value of ``env``) as on/off, by the one rule every switch uses."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(f"{env}={text!r}: expected one of {', '.join(TRUE_WORDS)} (on) or {', '.join(FALSE_WORDS)} "
                      "(off), in any case")


def _int(lo=None):
    def parse(env, text):
        try:
            v = int(text.strip())
        except ValueError:
            raise ConfigError(f"{env}={text!r}: expected an integer") from None
        if lo is not None and v < lo:
            raise ConfigError(f"{env}={text!r}: expected an integer >= {lo}")
        return v
    parse.kind = "integer" + (f" >= {lo}" if lo is not None else "")
    return parse


def _float_pos(env, text):
    try:
        v = float(text.strip())
    except ValueError:
        raise ConfigError(f"{env}={text!r}: expected a number of seconds") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ConfigError(f"{env}={text!r}: expected a finite number of seconds > 0")
    return v


_float_pos.kind = "seconds > 0"


def _str(env, text):
    return text


_str.kind = "text"


def _choice(*values):
    def parse(env, text):
        word = text.strip().lower()
        if word not in values:
            raise ConfigError(f"{env}={text!r}: expected one of {', '.join(values)}")
        return word
    parse.kind = " / ".join(values)
    parse.values = values
    return parse


def _bool(env, text):
    return parse_bool(env, text)


_bool.kind = "on/off"


def _auto_bool(env, text):
    """``auto`` or an on/off word (by the one rule)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return parse_bool(env, text)
    except ConfigError:
        raise ConfigError(f"{env}={text!r}: expected auto, or one of {', '.join(TRUE_WORDS)} (on) or "
                          f"{', '.join(FALSE_WORDS)} (off), in any case") from None


_auto_bool.kind = "auto / on/off"


@dataclass(frozen=True)
class Knob:
    """One switch: the attribute ``name`` of this module, read from ``env``; ``default`` when unset."""
    name: str
    env: str
    parse: Callable[[str, str], Any]
    default: Any
    doc: str

    @property
    def kind(self) -> str:
        return self.parse.kind

    def check(self, value):
        """A value given to :func:`override`: the type the environment would give, or None (the default)."""
        if value is None:
            return None
        if self.parse is _bool:
            if not isinstance(value, bool):
                raise ConfigError(f"config.{self.name}: expected True or False, got {value!r}")
            return value
        if self.parse is _auto_bool:
            if not isinstance(value, bool) and value != "auto":
                raise ConfigError(f"config.{self.name}: expected True, False or 'auto', got {value!r}")
            return value
        if self.parse is _str:
            if not isinstance(value, str):
                raise ConfigError(f"config.{self.name}: expected a string, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"config.{self.name}: expected {self.kind}, got {value!r}")
        return self.parse(f"config.{self.name}", str(value))


def _k(name, env, parse, default, doc):
    return Knob(name, env, parse, default, doc)


# The table: one row per switch.  Variables named NEURON_* / TORCH_NEURONX_* / TORCHNEURON_* / NKI_* are the
# Neuron SDK's own (trnsim honours them as the SDK documents them); TRNSIM_* are trnsim's.
KNOBS: dict[str, Knob] = {k.name: k for k in (
    # -- what is simulated ------------------------------------------------------------------------------------
    _k("torchneuron_target", "TORCHNEURON_TARGET", _str, None,
       "`sim`: `import torch` registers trnsim's `neuron` device and `import nki` resolves to trnsim. Unset (or "
       "another value): trnsim registers and shadows nothing."),
    _k("nki_simulator", "NKI_SIMULATOR", _bool, False,
       "On: `import nki` / `import neuronxcc.nki` resolve to trnsim's NKI (without the PyTorch device)."),
    _k("platform_target", "NEURON_PLATFORM_TARGET_OVERRIDE", _str, None,
       "The chip simulated: trn1, trn2 or trn3 (aliases gen2, gen3, gen4). Unset: trn2."),
    _k("logical_nc_config", "NEURON_LOGICAL_NC_CONFIG", _int(1), None,
       "Logical NeuronCore size (1 or 2, as the target allows). Unset: the target's default."),
    _k("nki_nc_version", "NKI_NC_VERSION", _str, None,
       "The NeuronCore generation `nki.cpu_simulate` (nki-library's harness) runs on: gen2, gen3, gen4. "
       "Unset: as NEURON_PLATFORM_TARGET_OVERRIDE."),
    # -- the PyTorch device -----------------------------------------------------------------------------------
    _k("fallback", "TORCHNEURON_FALLBACK", _choice("warn", "error"), "warn",
       "What an op without a device lowering does: `warn` runs it on the CPU with a warning, `error` raises."),
    _k("disable_fallback_execution", "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", _bool, True,
       "Off: a graph `torch.compile(backend=\"neuron\")` cannot compile runs eagerly with a warning; on: it "
       "raises."),
    _k("neff_cache_dir", "TORCH_NEURONX_NEFF_CACHE_DIR", _str, None,
       "Directory of the compile cache. Unset: $XDG_CACHE_HOME/trnsim/compile (or ~/.cache/trnsim/compile)."),
    _k("neuron_cc_flags", "NEURON_CC_FLAGS", _str, "",
       "Compiler flags; trnsim honours `--retry_failed_compilation` (retry graphs the cache records as failed)."),
    _k("compile_cache", "TRNSIM_COMPILE_CACHE", _bool, True, "The on-disk cache of compiled graphs."),
    _k("compile_cache_max_bytes", "TRNSIM_COMPILE_CACHE_MAX_BYTES", _int(0), None,
       "Size the compile cache is trimmed to (least recently used first). Unset: 256 MiB."),
    _k("cost_cache", "TRNSIM_COST_CACHE", _bool, True,
       "The on-disk cache of simulated op durations (per op, shapes, dtypes, target)."),
    _k("cache_dir", "TRNSIM_CACHE_DIR", _str, None, "Directory of the op-cost cache. Unset: ~/.cache/trnsim."),
    _k("topology", "TRNSIM_TOPOLOGY", _str, None,
       "Topology the ranks of torch.distributed are placed on (a `trnsim.collectives` name). Unset: the "
       "target's instance."),
    _k("nodes", "TRNSIM_NODES", _int(1), None,
       "Instances the ranks span. Unset: the fewest that hold the world and divide it evenly."),
    _k("dist_timeout", "TRNSIM_DIST_TIMEOUT", _float_pos, None,
       "Seconds a collective of the `neuron` process group waits for its peers. Unset: the group's timeout, "
       "capped by trnsim's default."),
    # -- speed layers (results do not change) -----------------------------------------------------------------
    _k("issue_cache", "TRNSIM_ISSUE_CACHE", _bool, True,
       "Reuse an instruction's checks and cost when it is issued again with the same layout."),
    _k("loop_replay", "TRNSIM_LOOP_REPLAY", _bool, True,
       "Shape-only runs: append a straight-line loop's later iterations in bulk from the observed ones "
       "(same records and timeline)."),
    _k("shape_only_meta", "TRNSIM_SHAPE_ONLY_META", _bool, True,
       "The estimator's decoder-template layers and optimizer steps run eagerly on shape-only tensors with plain "
       "meta payloads (off: fake-tensor payloads, the reference; the same costs)."),
    _k("scheduler", "TRNSIM_SCHEDULER", _choice("auto", "python", "numba"), "auto",
       "How the one scheduler loop runs: `numba` compiled; `python` uncompiled (for debugging: the same "
       "timelines, slower); `auto` compiled once a process has scheduled 10,000 instructions, uncompiled before "
       "(a short run does not load numba); when numba's cache does not hold the compiled loop (after an install or "
       "an upgrade: compiling it takes about 1.5 min, `trnsim warmup` does it ahead), uncompiled until the "
       "process has scheduled 1,000,000."),
    _k("no_numba", "TRNSIM_NO_NUMBA", _bool, False,
       "On: run the scheduler loop uncompiled, as `TRNSIM_SCHEDULER=python` (numba is not loaded for it)."),
    # -- model choices and checks -----------------------------------------------------------------------------
    _k("precise_fp", "NKI_PRECISE_FP", _bool, True,
       "Round engine results as the hardware does (off: faster, float32 throughout)."),
    _k("strict_uninit", "TRNSIM_STRICT_UNINIT", _bool, False, "On: reading memory never written raises."),
    _k("strict_races", "TRNSIM_STRICT_RACES", _bool, False,
       "On: a race between programs sharing memory without a barrier raises (off: a warning)."),
    _k("dma_round_robin", "TRNSIM_DMA_ROUND_ROBIN", _bool, True,
       "On: the queues of one DMA engine share it round robin (NeuronCore-v2/v3), modelled in simulated time; "
       "off: each engine serves the earliest transfer in program order of those ready on it, as on NeuronCore-v4 "
       "(a rule of the one scheduler loop; the timelines before the round robin, to compare with them)."),
    _k("serial_host_ops", "TRNSIM_SERIAL_HOST_OPS", _auto_bool, "auto",
       "Run the host numerics of the device ops whose results cannot depend on the thread count (elementwise, "
       "copies, gathers, max/min, sorts) on one host thread: torch's thread pool spin-waits, which on a loaded "
       "host costs many times the CPU time. On: always; off: the caller's `torch.get_num_threads()`; `auto`: one "
       "thread unless, over the last quarter second, the cores this process may use had one free beyond its own "
       "(Linux `/proc/stat`; elsewhere one thread). The same values and simulated times either way."),
    # -- command line -----------------------------------------------------------------------------------------
    _k("estimate_fork", "TRNSIM_ESTIMATE_FORK", _auto_bool, "auto",
       "`trnsim estimate --compile` without parallelism flags: a forked helper compiles the runner-up while the "
       "process compiles the fastest configuration. `auto`: when `os.fork` exists, two CPUs are usable and the "
       "layer-cost cache is on; on: also with one CPU; off: one process. The same figures either way."),
    _k("progress", "TRNSIM_PROGRESS", _bool, True,
       "Off: the `trnsim` command shows no progress line (it shows one only on a terminal anyway)."),
    # -- tests and tools --------------------------------------------------------------------------------------
    _k("nki_library_path", "NKI_LIBRARY_PATH", _str, None,
       "A checkout of aws-neuron/nki-library for the tests and tools that run it. Unset: those tests skip."),
)}

_UNSET = object()
_overrides: dict[str, Any] = {}
_parsed: dict[str, tuple] = {}          # name -> (raw text, value): the last environment value parsed


def _get(knob: Knob):
    v = _overrides.get(knob.name, _UNSET)
    if v is not _UNSET:
        return knob.default if v is None else v
    text = os.environ.get(knob.env)
    if text is None or not text.strip():
        return knob.default
    last = _parsed.get(knob.name)
    if last is not None and last[0] == text:
        return last[1]
    value = knob.parse(knob.env, text)
    _parsed[knob.name] = (text, value)
    return value


def __getattr__(name):
    knob = KNOBS.get(name)
    if knob is None:
        raise AttributeError(f"trnsim.config has no switch {name!r}; the switches: {', '.join(KNOBS)}")
    return _get(knob)


def __dir__():
    return sorted({*globals(), *KNOBS})


def _knob(name):
    knob = KNOBS.get(name)
    if knob is None:
        raise ConfigError(f"trnsim.config has no switch {name!r}; the switches: {', '.join(KNOBS)}")
    return knob


def set(name: str, value) -> Any:        # noqa: A001 - the module's verb, as config.set(...)
    """Set switch ``name`` for this process, over the environment (None: back to its default); returns what
    the switch was before (its value, as reading it would give)."""
    knob = _knob(name)
    prev = _get(knob)
    _overrides[name] = knob.check(value)
    return prev


def overridden() -> dict:
    """``{name: value}`` of the switches set by :func:`set` or :func:`override` (None: the default)."""
    return dict(_overrides)


def reset(name: "str | None" = None) -> None:
    """Drop the override of ``name`` (all overrides when None): the environment decides again."""
    if name is None:
        _overrides.clear()
    else:
        _knob(name)
        _overrides.pop(name, None)


@contextlib.contextmanager
def override(**values) -> Iterator[None]:
    """Within the block, each named switch has the value given (None: its default), whatever the environment
    says; on exit every switch is back to what it was."""
    checked = {name: _knob(name).check(v) for name, v in values.items()}
    saved = {name: _overrides.get(name, _UNSET) for name in checked}
    _overrides.update(checked)
    try:
        yield
    finally:
        for name, v in saved.items():
            if v is _UNSET:
                _overrides.pop(name, None)
            else:
                _overrides[name] = v


def _default_text(knob):
    if knob.default is None:
        return "unset"
    if isinstance(knob.default, bool):
        return "on" if knob.default else "off"
    return f"`{knob.default}`" if knob.default != "" else "empty"


def markdown_table() -> str:
    """The documented table of every switch (docs/configuration.md)."""
    lines = ["# Configuration", "",
             "Every environment switch trnsim reads. Generated from `trnsim/config.py` by "
             "`python tools/write_config_doc.py`; a test checks this file against the module.",
             "",
             f"On/off switches accept {', '.join(f'`{w}`' for w in TRUE_WORDS)} (on) and "
             f"{', '.join(f'`{w}`' for w in FALSE_WORDS)} (off), in any case; any other value is an error naming "
             "the variable. A variable set to the empty string counts as unset. In Python, read a switch as "
             "`trnsim.config.NAME`; tests change one for a block with `trnsim.config.override(NAME=value)`.", "",
             "| variable | `trnsim.config.` | kind | default | meaning |", "|---|---|---|---|---|"]
    for k in KNOBS.values():
        lines.append(f"| `{k.env}` | `{k.name}` | {k.kind} | {_default_text(k)} | {k.doc} |")
    return "\n".join(lines) + "\n"

