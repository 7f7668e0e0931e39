"""Golden parses of `sample_logs/`: what `specwatch parse --all` prints for each sample log.

The goldens are the parser's spec. They change only through this explicit step, whose diff must be
read before it is committed:
    python tests/goldens.py --update && git diff tests/golden/
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
GOLDEN = ROOT / "tests" / "golden"


def parse_all(log: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "specwatch.cli", "parse", "--all", str(log)],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    # Paths are machine-specific: store them relative to the repo.
    return out.replace(str(log), f"sample_logs/{log.name}")


def golden_path(log: Path) -> Path:
    return GOLDEN / (log.name + ".jsonl")


if __name__ == "__main__":
    if "--update" not in sys.argv:
        sys.exit("usage: python tests/goldens.py --update   (then read `git diff tests/golden/`)")
    GOLDEN.mkdir(exist_ok=True)
    for log in sorted(SAMPLES.glob("*.log")):
        golden_path(log).write_text(parse_all(log))
        print(f"wrote {golden_path(log).relative_to(ROOT)}")
