"""The server flags doctor's advice names per engine, as JSON on stdout: {"sglang": [...], "vllm":
[...]}, each flag as written (`--max-num-seqs`). Run with specwatch's interpreter by the contract
tiers (tests/contract, tests/contract_vllm), which check every one against the real engine's
parser. Collected from the engine's words (diagnose/flags), every failure hint and the
slower-than-baseline advice, with specwatch's own commands (`specwatch recommend --engine ...`)
left out."""
from __future__ import annotations

import json
import re

from specwatch.diagnose import flags, serving, speed

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
OWN_COMMAND = re.compile(r"`specwatch [^`]*`")


def texts(engine: str) -> list[str]:
    row = {"served_by": engine, "speculative_num_steps": 3, "speculative_eagle_topk": 1,
           "speculative_num_draft_tokens": 4, "accept_len": 1.9}
    words = flags.words(row)
    out = list(words.values())
    for pat, text in serving.FAILURE_HINTS:
        out.append(text.format(*["x"] * pat.groups, **words))
    out += [speed._speed_suggestion(row, None, "", paying) for paying in ([], [1, 2])]
    return out


def main() -> None:
    print(json.dumps({e: sorted({f for t in texts(e) for f in FLAG.findall(OWN_COMMAND.sub("", t))})
                      for e in ("sglang", "vllm")}))


if __name__ == "__main__":
    main()
