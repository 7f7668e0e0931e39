"""A printed value as its type: ints plain decimals within int64, floats finite (`1e999` is
refused, `nan` is missing), `N%` kept as a `Pct`, keys normalised (`#running-req` -> `running_req`).
The one definition `parse` and the checks of stored rows use; raises ValueError naming what was
expected."""
from __future__ import annotations

import math
import re
from typing import Any

_KEY_CLEAN = re.compile(r"[^a-z0-9]+")
_INT = re.compile(r"^-?\d+$")
_FLOAT = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")
_INT64 = 2 ** 63 - 1
PLAIN_INT = re.compile(r"-?\d{1,18}$")            # always within int64
PLAIN_FLOAT = re.compile(r"-?\d{1,300}(?:\.\d*)?$")  # no exponent: always finite


class Pct(float):
    """A value that was printed with a trailing `%` (stored as the number before the sign)."""


_key_cache: dict[str, str] = {}


def normalize_key(printed: str) -> str:
    """`#running-req` -> `running_req`, `gen throughput (token/s)` -> `gen_throughput`."""
    key = _key_cache.get(printed)
    if key is None:
        k = re.sub(r"\([^)]*\)", "", printed).replace("#", "").lower()
        key = _KEY_CLEAN.sub("_", k).strip("_")
        if len(_key_cache) < 10_000:
            _key_cache[printed] = key
    return key


def to_int(text: str) -> int:
    if not _INT.match(text):
        raise ValueError("not a valid int")
    if len(text) > 20:
        raise ValueError("out of range for a 64-bit integer")
    v = int(text)
    if v > _INT64 or v < -_INT64:
        raise ValueError("out of range for a 64-bit integer")
    return v


def to_float(text: str) -> float | None:
    if not _FLOAT.match(text):
        if text.lower() == "nan":
            return None
        raise ValueError("not a valid float")
    v = float(text)
    if not math.isfinite(v):
        raise ValueError("not a finite number")
    return v


def infer(text: str) -> Any:
    if _INT.match(text) and len(text) <= 20 and abs(int(text)) <= _INT64:
        return int(text)
    if _FLOAT.match(text) and math.isfinite(v := float(text)):
        return v
    if text == "True" or text == "False":
        return text == "True"
    if text.endswith("%") and _FLOAT.match(text[:-1]) and math.isfinite(float(text[:-1])):
        return Pct(text[:-1])
    return text


def typed(text: str, typ: str) -> Any:
    """Convert a printed value to its declared type; raises ValueError naming what was expected."""
    if typ == "int":
        return to_int(text)
    if typ == "float":
        return to_float(text)
    if typ == "bool":
        if text in ("True", "False"):
            return text == "True"
        raise ValueError("not True/False")
    if typ == "pct":
        num = text[:-1] if text.endswith("%") else text
        if num.lower() == "nan":
            return "nan"
        v = to_float(num)
        return Pct(num) if text.endswith("%") else v
    if typ == "float_list":
        try:
            out = [to_float(x.strip()) for x in text.strip("[]").split(",")]
        except ValueError:
            raise ValueError("not a comma-separated list of finite numbers") from None
        return out
    if typ == "int_list":
        try:
            return [to_int(x.strip()) for x in text.strip("[]").split(",")]
        except ValueError:
            raise ValueError("not a comma-separated list of integers") from None
    return text
