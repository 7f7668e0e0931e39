"""Write specwatch/run/workloads/long_context.jsonl: long prompts built from synthetic documents.

Every document here is generated from the templates below with a fixed seed (no outside text), so
the set is the project's own work, dedicated to the public domain with the other bundled sets
(CC0-1.0, see specwatch/run/workloads/README.md). The tasks are the kinds long-context serving
sees: find one fact in a long record (a needle), answer across several memos, summarise a long
meeting, read a long source file, compute over a long table. 3,500-14,000 characters each
(about 1k-3.5k tokens for a BPE tokenizer): long for a bundled set, short for real long-context
work; give your own file for 32k+.

Usage: python scripts/make_long_context_prompts.py   (rewrites the file; the output is stable)
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "specwatch" / "run" / "workloads" / \
    "long_context.jsonl"
CITIES = ["Arden", "Belmont", "Corvale", "Dunmore", "Elston", "Fairhaven", "Glenrock", "Harwick",
          "Ivybridge", "Juniper", "Kestrel", "Lowmoor", "Marlow", "Northgate", "Oakridge",
          "Pinefield", "Quarry", "Rosedale", "Stonybrook", "Thornbury"]
PEOPLE = ["Ana", "Bruno", "Chen", "Dara", "Emeka", "Fatima", "Goran", "Hana", "Ivan", "Jules",
          "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya"]
ITEMS = ["hex bolts", "copper wire", "ball bearings", "pipe fittings", "gaskets", "hinges",
         "cable ties", "washers", "springs", "rivets", "fuses", "brackets"]
TOPICS = ["the release schedule", "the database migration", "on-call rotation", "the budget",
          "customer feedback", "the hiring plan", "load testing", "the office move"]


def needle(rng: random.Random) -> str:
    lines = []
    target = None
    for i in range(150):
        item, city = rng.choice(ITEMS), rng.choice(CITIES)
        qty = rng.randint(10, 990)
        lines.append(f"Shipment {1000 + i}: {qty} boxes of {item} left the {city} depot on day "
                     f"{rng.randint(1, 365)}, checked by {rng.choice(PEOPLE)}.")
        if i == 97:
            target = (1000 + i, item, city, qty)
    num, item, city, qty = target
    return ("Below is a shipping log. Read it, then answer the question after it.\n\n"
            + "\n".join(lines)
            + f"\n\nQuestion: how many boxes did shipment {num} carry, what was in them, and "
              "which depot did they leave from? Answer in one sentence.")


def memos(rng: random.Random) -> str:
    parts = []
    for i in range(24):
        a, b = rng.sample(PEOPLE, 2)
        topic = rng.choice(TOPICS)
        parts.append(
            f"Memo {i + 1}. From {a} to {b}, about {topic}. {a} writes that the team in "
            f"{rng.choice(CITIES)} finished {rng.randint(2, 9)} of the open tasks this week and "
            f"that {rng.randint(1, 5)} remain blocked on review. {a} asks {b} to confirm the "
            f"next checkpoint for {rng.choice(['Monday', 'Tuesday', 'Thursday', 'Friday'])} and "
            f"notes that the estimate moved from {rng.randint(2, 6)} to {rng.randint(6, 12)} "
            f"days because of {rng.choice(['a flaky test', 'a vendor delay', 'new requirements', 'sick leave', 'a security review'])}. "
            f"{b} is also asked to share the numbers with {rng.choice(PEOPLE)} before the end of "
            "the day.")
    return ("Here are internal memos, in the order they were sent.\n\n" + "\n\n".join(parts)
            + "\n\nQuestion: which people sent more than one memo, and which topics did those "
              "memos cover? Then say which memo reports the largest change in its estimate.")


def meeting(rng: random.Random) -> str:
    turns = []
    people = rng.sample(PEOPLE, 5)
    for i in range(70):
        who = rng.choice(people)
        topic = rng.choice(TOPICS)
        say = rng.choice([
            f"I think we should revisit {topic} before we commit to a date.",
            f"For {topic}, my numbers say we are {rng.randint(1, 4)} weeks behind.",
            f"Can we agree that {rng.choice(people)} owns {topic} from now on?",
            f"The risk with {topic} is mostly on our side, not the vendor's.",
            f"I would rather cut scope on {topic} than move the launch again.",
            f"Let's park {topic} and come back to it next week with data.",
            f"We tried that for {topic} last quarter and it cost us {rng.randint(2, 9)} days.",
        ])
        turns.append(f"{who}: {say}")
    return ("This is the transcript of a long planning meeting.\n\n" + "\n".join(turns)
            + "\n\nSummarise the meeting in five bullet points: the decisions made, who owns "
              "what, and what was left open.")


def source_file(rng: random.Random) -> str:
    funcs = []
    names = []
    for i in range(40):
        name = f"{rng.choice(['load', 'scale', 'merge', 'clip', 'count', 'shift'])}_{rng.choice(['rows', 'items', 'values', 'ranges', 'keys'])}_{i}"
        names.append(name)
        k = rng.randint(2, 9)
        op = rng.choice(["+", "*", "-"])
        funcs.append(
            f"def {name}(xs):\n"
            f"    \"\"\"Apply step {i} of the pipeline.\"\"\"\n"
            f"    out = []\n"
            f"    for x in xs:\n"
            f"        if x % {k} == 0:\n"
            f"            out.append(x {op} {k})\n"
            f"        else:\n"
            f"            out.append(x)\n"
            f"    return out\n")
    pick = names[27]
    return ("Here is a Python module.\n\n```python\n" + "\n\n".join(funcs)
            + f"```\n\nWhat does {pick}([3, 4, 6, 12, 18]) return? Explain the steps briefly.")


def table(rng: random.Random) -> str:
    rows = ["city,day,high_c,low_c,rain_mm"]
    for day in range(1, 31):
        for city in rng.sample(CITIES, 6):
            hi = rng.randint(8, 31)
            rows.append(f"{city},{day},{hi},{hi - rng.randint(4, 12)},{rng.choice([0, 0, 0, 1, 2, 5, 12])}")
    return ("The CSV below lists daily weather readings.\n\n" + "\n".join(rows)
            + "\n\nWhich city had the most days with rain, and what was the highest temperature "
              "recorded overall? Show how you found both.")


def main() -> None:
    rng = random.Random(30)
    makers = [needle, memos, meeting, source_file, table, needle, memos, meeting]
    lines = [json.dumps({"prompt": make(rng), "category": "long_context"}) for make in makers]
    OUT.write_text("\n".join(lines) + "\n")
    for line in lines:
        print(len(json.loads(line)["prompt"]))


if __name__ == "__main__":
    main()
