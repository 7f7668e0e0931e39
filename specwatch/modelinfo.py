"""What a model directory named by a `server_args` line says, when it exists on this machine.

The only module that opens a model's `config.json` (specwatch/engine aside, which loads its own
models). `info(path)` reads it (and hashes the weights) of a local model directory: the target's
architecture and layer count, a draft's aux layer ids, and an identity of the weights, so two runs
of one draft served with different ids (two copies of its config.json) are recognised as siblings.
Everything is None when the directory or a key is absent: nothing is guessed. `aux_layer_ids(path)`
is a draft's ids alone; `write_with_aux_ids` makes a copy of a draft that serves other ids.

Not here: what the ids capture (aux_layers), judging a run (diagnose).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelInfo:
    path: str                          # the directory read
    architecture: str | None           # architectures[0]
    num_layers: int | None             # num_hidden_layers (text_config's for multimodal wrappers)
    aux_layer_ids: tuple[int, ...] | None  # eagle_config.eagle_aux_hidden_state_layer_ids (drafts)
    weights_sha1: str | None           # sha1 over the weight files' names and bytes, None if none


def local_dir(path: str | None) -> Path | None:
    """The directory `path` names (builtin:<name> = a packaged model, fixture:<name> = a built
    fixture model, engine/fixture.py; never builds one) if it has a config.json."""
    if not path:
        return None
    from specwatch.engine import BUILTIN_PREFIX, fixture, models_dir
    if fixture.is_fixture(path):
        d = fixture.built_dir(path)
        return d if d is not None and (d / "config.json").is_file() else None
    d = models_dir() / path[len(BUILTIN_PREFIX):] if path.startswith(BUILTIN_PREFIX) \
        else Path(path).expanduser()
    return d if (d / "config.json").is_file() else None


def _layers(cfg: dict) -> int | None:
    for c in (cfg, cfg.get("text_config") or {}, cfg.get("language_config") or {}):
        v = c.get("num_hidden_layers") if isinstance(c, dict) else None
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _ids(cfg: dict) -> tuple[int, ...] | None:
    eagle = cfg.get("eagle_config")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    if ids is None:
        ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return tuple(ids)
    return None


@functools.lru_cache(maxsize=256)
def _weights_sha1(d: str, stamp: tuple) -> str | None:
    files = sorted(f for f in Path(d).iterdir() if f.name.endswith(WEIGHT_SUFFIXES) and f.is_file())
    if not files:
        return None
    h = hashlib.sha1()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:   # follows symlinks: a sweep's aux-ids copy links the weights
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


def weights_sha1(d: Path) -> str | None:
    stamp = tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in d.iterdir()
                         if f.name.endswith(WEIGHT_SUFFIXES) and f.is_file()))
    return _weights_sha1(str(d), stamp)


def _config(d: Path) -> dict | None:
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def info(path: str | None, hash_weights: bool = True) -> ModelInfo | None:
    """ModelInfo of a local model dir, None if `path` is not one (or its config.json is unreadable).
    `hash_weights=False` leaves weights_sha1 None (a target's weights can be tens of GB)."""
    d = local_dir(path)
    cfg = _config(d) if d is not None else None
    if cfg is None:
        return None
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    return ModelInfo(str(d), arch, _layers(cfg), _ids(cfg),
                     weights_sha1(d) if hash_weights else None)


def aux_layer_ids(path: str | None) -> list[int] | None:
    """The aux layer ids a local draft's config.json names, None if it names none or is not local."""
    mi = info(path, hash_weights=False)
    return list(mi.aux_layer_ids) if mi is not None and mi.aux_layer_ids is not None else None


def write_with_aux_ids(src: Path, dst: Path, ids: list[int]) -> None:
    """Fill the empty directory `dst` with a copy of the draft `src` whose config.json names `ids`
    (eagle_config.eagle_aux_hidden_state_layer_ids, use_aux_hidden_state defaulting to true);
    every other file is a symlink to the original. Raises ValueError when `src`'s config.json is
    unreadable or not a JSON object."""
    cfg = _config(src)
    if cfg is None:
        raise ValueError(f"{src / 'config.json'}: not a readable JSON object; the draft's config "
                         f"is needed to serve other aux ids")
    for f in src.iterdir():
        if f.name != "config.json":
            os.symlink(f.resolve(), dst / f.name)
    eagle = dict(cfg.get("eagle_config") or {})
    eagle["eagle_aux_hidden_state_layer_ids"] = list(ids)
    eagle.setdefault("use_aux_hidden_state", True)
    cfg["eagle_config"] = eagle
    (dst / "config.json").write_text(json.dumps(cfg, indent=1))
