"""Log line formats as data: loads `lines.toml` into typed declarations.

This module only reads the declarations. `specwatch.logs.parse` applies them and checks every sample
line against its expected parse when it is imported, so a broken format never reaches a user.
It is not a parser and imports nothing else from specwatch.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

FORMATS_FILE = Path(__file__).with_name("lines.toml")
TYPES = ("int", "float", "bool", "pct", "float_list", "int_list", "str")


class FormatError(ValueError):
    """A format declaration is invalid or fails one of its own samples."""


@dataclass(frozen=True)
class Column:
    """Where one printed field is stored: a typed column, fed by the key or one of its aliases."""

    key: str
    column: str
    type: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sample:
    text: str
    expect: dict
    note: str = ""
    kind: str | None = None     # [[other]] and [[lookalike]] samples name their kind


@dataclass(frozen=True)
class LineFormat:
    kind: str
    headers: tuple[str, ...]
    first_key: str | None
    required: tuple[str, ...]
    columns: tuple[Column, ...]
    samples: tuple[Sample, ...]
    # printed (normalised) key -> Column, aliases included
    by_key: dict[str, Column] = field(default_factory=dict, compare=False)
    # After a capture prefix of no known shape, a line counts only when its message is complete:
    # it carries one of these field sets (default: `required`), and every key no column declares
    # prints a number, True/False or a percentage, unless it is one of `text_keys`.
    complete_any: tuple[tuple[str, ...], ...] = ()
    text_keys: dict[str, str] = field(default_factory=dict, compare=False)  # key -> its regex
    # keys printed as `M [lo, hi]` (a value with ", " inside): parsed into key, key_lo, key_hi
    ranges: tuple[str, ...] = ()


@dataclass(frozen=True)
class Formats:
    lines: dict[str, LineFormat]
    noise: tuple[str, ...]
    malformed: tuple[tuple[str, str], ...]  # (text, reason fragment)
    # non-metric kinds (config, events) with their expected parse, and lookalike formats of
    # other engines that must be rejected as their own kind (expect = {reason = fragment})
    other: tuple[Sample, ...] = ()
    lookalike: tuple[Sample, ...] = ()
    # records hard-wrapped over several physical lines (checked by specwatch.logs.reassemble):
    # Sample.text holds the lines joined by "\n"; expect names the joined parse, or `reason`
    wrapped: tuple[Sample, ...] = ()


def _line_format(raw: dict, where: str) -> LineFormat:
    try:
        kind = raw["kind"]
        headers = tuple(raw["header"].split("|"))
    except KeyError as exc:
        raise FormatError(f"{where}: missing {exc.args[0]!r}") from None
    columns = []
    for key, spec in raw.get("columns", {}).items():
        if len(spec) < 2 or spec[1] not in TYPES:
            raise FormatError(f"{where}: column {key!r} must be [store_column, type, alias...] "
                              f"with type one of {TYPES}, got {spec!r}")
        columns.append(Column(key, spec[0], spec[1], tuple(spec[2:])))
    by_key = {}
    for col in columns:
        for k in (col.key, *col.aliases):
            by_key[k] = col
    samples = tuple(Sample(s["text"], s.get("expect", {}), s.get("note", ""))
                    for s in raw.get("samples", []))
    if not samples:
        raise FormatError(f"{where}: line kind {kind!r} has no sample lines; every format needs at "
                          "least one real-looking sample with its expected parse")
    required = tuple(raw.get("required", []))
    complete_any = tuple(tuple(c) for c in raw.get("complete_any", [])) or (required,)
    return LineFormat(kind, headers, raw.get("first_key"), required, tuple(columns), samples,
                      by_key, complete_any, dict(raw.get("text_keys", {})),
                      tuple(raw.get("ranges", [])))


@lru_cache(maxsize=None)
def load(path: Path = FORMATS_FILE) -> Formats:
    """Read the declarations (unchecked; `specwatch.logs.parse` checks the samples)."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    lines = {}
    for i, raw in enumerate(data.get("line", [])):
        fmt = _line_format(raw, f"{path}: [[line]] #{i + 1}")
        lines[fmt.kind] = fmt
    noise = tuple(n["text"] for n in data.get("noise", []))
    malformed = tuple((m["text"], m["reason"]) for m in data.get("malformed", []))
    other = tuple(Sample(o["text"], o.get("expect", {}), o.get("note", ""), o["kind"])
                  for o in data.get("other", []))
    look = tuple(Sample(o["text"], {"reason": o["reason"]}, o.get("note", ""), o["kind"])
                 for o in data.get("lookalike", []))
    wrapped = tuple(Sample("\n".join(w["lines"]), w.get("expect", {}) or {"reason": w["reason"]},
                           w.get("note", ""), w["kind"]) for w in data.get("wrapped", []))
    return Formats(lines, noise, malformed, other, look, wrapped)
