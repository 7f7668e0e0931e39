"""Line numbers for keys of a TOML file (tomllib reports none), for `file:line: key:` errors.

`Lines(path, text).at(section, key, index)` gives `path:LINE` of `key` in the `index`-th
`[[section]]` (or `[section]`, or the top level), falling back to the section's header line, then
to line 1. A scan of the text, not a TOML parser: it needs only headers and `key =` lines.

Not here: reading or checking values (see `sweepfile`).
"""
from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")


class Lines:
    """Finds the line of a key by scanning the text: tomllib reports no positions."""

    def __init__(self, path: str, text: str):
        self.path = path
        # (section name, index within its array of tables or 0, {key: line}, header line)
        self.sections: list[tuple[str, int, dict[str, int], int]] = [("", 0, {}, 1)]
        counts: dict[str, int] = {}
        in_multiline = None
        for no, line in enumerate(text.splitlines(), 1):
            if in_multiline:
                if in_multiline in line:
                    in_multiline = None
                continue
            m = _HEADER.match(line)
            if m and not _KEY.match(line):
                name = m.group(2).strip().strip("\"'")
                idx = 0
                if m.group(1) == "[[":
                    idx = counts.get(name, 0)
                    counts[name] = idx + 1
                self.sections.append((name, idx, {}, no))
                continue
            k = _KEY.match(line)
            if k:
                self.sections[-1][2].setdefault(k.group(1).strip('"'), no)
                for q in ('"""', "'''"):
                    if line.count(q) == 1:
                        in_multiline = q

    def line(self, section: str = "", key: str | None = None, index: int = 0) -> int:
        for name, idx, keys, header in self.sections:
            if name == section and idx == index:
                return keys.get(key, header) if key else header
        # An inline table (`workload = {...}`) or a key of the top level.
        top = self.sections[0][2]
        return top.get(section or key or "", 1)

    def at(self, section: str = "", key: str | None = None, index: int = 0) -> str:
        return f"{self.path}:{self.line(section, key, index)}"
