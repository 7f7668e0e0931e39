"""Finite ranges for the numbers of a TOML file (issue 26).

TOML has `nan` and `inf`, and tomllib gives integers of any size; a comparison such as `x > 0`
lets NaN through. A `Range` refuses both and says what it allows, for `file:line: key:` errors.

Not here: which key has which range (see `sweepfile.RANGES`), line numbers (see `tomllines`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """The finite numbers a key accepts: lo..hi (lo itself excluded when `lo_open`), plus the
    exact values in `also`; `why` (optional) says where a bound comes from."""

    lo: float
    hi: float
    lo_open: bool = False
    also: tuple = ()
    why: str = ""

    def holds(self, v) -> bool:
        if isinstance(v, float) and not math.isfinite(v):
            return False
        return v in self.also or ((self.lo < v) if self.lo_open else (self.lo <= v)) \
            and v <= self.hi

    def refusal(self, key: str, v) -> str:
        """`key: VALUE is out of range; allowed: RANGE (why)`."""
        text = repr(v)
        shown = text if len(text) <= 24 else f"{text[:6]}...({len(text)} digits)"
        why = f" ({self.why})" if self.why else ""
        return f"{key}: {shown} is out of range; allowed: {self}{why}"

    def __str__(self) -> str:
        lo, hi = _num(self.lo), _num(self.hi)
        return " or ".join([*map(_num, self.also),
                            f"> {lo} and <= {hi}" if self.lo_open else f"{lo}..{hi}"])


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def numbers(value):
    """Every number in a TOML value: itself, or those in its lists and tables (not booleans)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from numbers(v)
