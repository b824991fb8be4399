"""The error raised when a kernel breaks a hardware rule, and where in the user's kernel it happened."""

from __future__ import annotations

import os
import sys

__all__ = ["NkiValidationError", "caller_location", "fail"]

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIB_DIR = os.path.join(_PKG_DIR, "kernels", "library")   # trnsim's own NKI kernels count as kernel source


class NkiValidationError(Exception):
    """A hardware constraint broken by an instruction: names the instruction, operand, value, limit and the
    kernel source line."""

    def __init__(self, message, instruction=None, operand=None, value=None, limit=None, location=None):
        self.instruction = instruction
        self.operand = operand
        self.value = value
        self.limit = limit
        self.location = location
        where = f" [{location[0]}:{location[1]}]" if location else ""
        super().__init__(f"{message}{where}")


def caller_location():
    """``(filename, lineno)`` of the innermost frame outside the trnsim package (the user's kernel line), or in
    trnsim's kernel library (the library kernel's line)."""
    f = sys._getframe(1)
    user = _USER
    while f is not None:
        fn = f.f_code.co_filename
        u = user.get(fn)
        if u is None:
            user[fn] = u = not fn.startswith(_PKG_DIR) or fn.startswith(_LIB_DIR)
        if u:
            return (fn, f.f_lineno)
        f = f.f_back
    return None


_USER: dict = {}     # file name -> whether it counts as kernel source (caller_location's answer, memoised)


def fail(instr, operand, message, value=None, limit=None, loc=None):
    text = f"{instr}: operand '{operand}' {message}" if operand else f"{instr}: {message}"
    raise NkiValidationError(text, instr, operand, value, limit, loc)
