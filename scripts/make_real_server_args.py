"""Write `tests/data/real_server_args/`: real SGLang `server_args=` lines of several versions.

Not run by the tests or CI (it needs the published wheels); the files it wrote are committed.
    pip download --no-deps sglang==VERSION -d /tmp/wheels/VERSION     # 0.4.2 0.4.10 0.5.1 0.5.4 ...
    unzip /tmp/wheels/VERSION/*.whl 'sglang/*' -d /tmp/src/VERSION
    python scripts/make_real_server_args.py repr VERSION /tmp/src/VERSION
    PYTHONPATH=/tmp/src/0.5.23:DEPS python scripts/make_real_server_args.py dict 0.5.23 ALG [KEY=VALUE...]

`repr` (<= 0.5.18, where the line is the dataclass repr `ServerArgs(...)`): the fields of the
wheel's `ServerArgs` in declaration order with their literal defaults (a non-literal default is
printed as None), exactly as `dataclasses`' repr prints them, with the EAGLE settings below.
`dict` (0.5.19+): imports the wheel's real `ServerArgs` (needs psutil, tqdm, pybase64, msgspec,
pyzmq on the path; no GPU) and prints `resolved_dict()` through the engine's own redaction, as
`Engine` logs it.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_server_args"
EAGLE = {"model_path": "/models/Llama-3.1-8B-Instruct", "speculative_algorithm": "EAGLE3",
         "speculative_draft_model_path": "/models/EAGLE3-LLaMA3.1-8B", "speculative_num_steps": 3,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "tp_size": 2}


def dataclass_fields(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    out = {}
    for n in cls.body:
        if not (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)):
            continue
        v, val, show = n.value, None, True
        if isinstance(v, ast.Call) and getattr(v.func, "attr", getattr(v.func, "id", "")) == "field":
            for kw in v.keywords:
                if kw.arg == "default":
                    try:
                        val = ast.literal_eval(kw.value)
                    except ValueError:
                        val = None
                elif kw.arg == "default_factory" and isinstance(kw.value, ast.Name):
                    val = {"list": [], "dict": {}}.get(kw.value.id)
                elif kw.arg == "repr":
                    show = ast.literal_eval(kw.value)
        elif v is not None:
            try:
                val = ast.literal_eval(v)
            except ValueError:
                val = None
        if show:
            out[n.target.id] = val
    return out


def main() -> None:
    mode, version = sys.argv[1], sys.argv[2]
    OUT.mkdir(parents=True, exist_ok=True)
    if mode == "repr":
        f = dataclass_fields(Path(sys.argv[3]) / "sglang" / "srt" / "server_args.py")
        f.update({k: v for k, v in EAGLE.items() if k in f})
        line = "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in f.items()) + ")"
        name = f"sglang-{version}-repr-eagle.txt"
    else:
        import sglang.srt.server_args as sa
        from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
        over = dict(EAGLE, tp_size=1, speculative_algorithm=sys.argv[3].upper())
        for a in sys.argv[4:]:
            k, v = a.split("=", 1)
            over[k] = json.loads(v)
        line = "server_args=" + str(redact_watermark_secrets(sa.ServerArgs(**over).resolved_dict()))
        name = f"sglang-{version}-dict-{sys.argv[3].lower()}.txt"
    (OUT / name).write_text("[2026-05-20 10:00:00] " + line + "\n")
    print(OUT / name)


if __name__ == "__main__":
    main()
