"""Read a sweep file (TOML), check it, and expand it into the configs to measure.

A sweep file declares one target model, the server to run it with, a workload, and the speculative
configs to compare. A no-speculation baseline (one per tp/dp/pp shape) is always added. Example:

    name = "builtin-demo"                  # sweep name (default: the file's stem)
    engine = "builtin"                     # "builtin" (specwatch's CPU engine), "sglang" or
                                           # "vllm" (its keys: vllm_config)
    model = "builtin:target"               # target: a local dir, HF id (sglang) or builtin:<name>
    draft_model = "builtin:draft-eagle3"   # default draft for every speculative config
    speculative_algorithm = "EAGLE3"       # default EAGLE3
    server_flags = ["--decode-log-interval", "8"]   # passed to every config, baseline included
    concurrency = [1, 4]                   # load levels (request_rate, [slo]...: traffic.py)
    repeats = 1                            # measurements per (config, concurrency)
    # optional: launch_command = ["python", "-m", "sglang.launch_server"] (override the program),
    # sglang_version = "0.5.23" (picks version-specific flags; default: the installed one),
    # port = 30000 (fixed port; default: a free one per config), env = {NAME = "value"},
    # startup_timeout_s = 600, request_timeout_s = 300, stop_grace_s = 15; [slurm]: slurm_settings

    [workload]
    prompts = "builtin:mixed"     # builtin:<set> (workloads/README.md), or a file path
                                  # (relative to the sweep file): JSONL of {"prompt": ...} or
                                  # {"text": ...} rows, or a ShareGPT JSON/JSONL file
    format = "jsonl"              # "jsonl" | "sharegpt" (default: guessed from the file)
    num_prompts = 16              # measured requests per run (prompts are sampled with `seed`)
    warmup_requests = 2           # sent once per config before its first run, never counted
    output_tokens = 48            # fixed, or {min = 32, max = 64} sampled per request
    input_chars = {min = 40, max = 200}   # optional: cut/repeat prompts to this many characters
                                  # (= tokens on the built-in byte-level engine)
    temperature = 0.0
    seed = 0

    [[grid]]                      # cartesian product of the listed values
    speculative_num_steps = [2, 3]
    speculative_eagle_topk = 1    # topk 1: draft tokens default to steps + 1

    [[config]]                    # one explicit config
    name = "tree-k2"              # optional; default is derived from the values
    speculative_num_steps = 2
    speculative_eagle_topk = 2
    speculative_num_draft_tokens = 4

Keys of `[[grid]]` and `[[config]]`: `draft_model`, `speculative_algorithm`,
`speculative_num_steps`, `speculative_eagle_topk`, `speculative_num_draft_tokens`, `tp_size`,
`dp_size`, `pp_size` (a config occupies tp*pp*dp GPUs, tp*pp with --enable-dp-attention),
`aux_layer_ids` (a list of ints; written into a copy of the draft's config.json as
`eagle_config.eagle_aux_hidden_state_layer_ids`; needs a local draft dir) and `server_flags`
(extra flags for this config). In a grid every key may be a list of values; for `aux_layer_ids` and
`server_flags`, whose values are lists themselves, a list of lists is swept.

Names (the sweep's and each `[[config]] name`) become directories and run ids: letters, digits,
'.', '_' or '-', starting with a letter or digit, at most 100 characters; `baseline` and
`baseline-*` are reserved for the baselines. `env` keys are environment variable names; no string
that reaches a command line or the environment may hold a NUL, and no flag a newline or other
control character. Flags specwatch sets itself (`--port`, `--host`, `--model-path`, `--tp-size`,
`--dp-size`, `--pp-size` and their aliases) are refused in `server_flags`: use the keys.

Invalid combinations (draft tokens > steps*topk+1, topk = 1 with draft tokens != steps+1, topk > 1
without draft tokens, duplicates) are skipped with a reason; a TOML syntax error, an unknown key, a
wrong type or a number outside its range (`RANGES`: finite, never NaN) is a `SweepFileError`
naming the file, line and key.

Not here: running anything (see `sweep`), building command lines (see `launch`).
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch.engine import BUILTIN_PREFIX  # "builtin:": shipped models and prompt sets
from specwatch.run.tomllines import Lines as _Lines
from specwatch.run.tomlranges import Range, numbers
from specwatch.run import traffic  # load levels, arrivals, SLO, rate search, adaptive repeats
from specwatch.run import sglang_config, vllm_config  # what a config means on each engine

if TYPE_CHECKING:
    from specwatch.run import slurm_settings

ENGINES = ("builtin", "sglang", "vllm")
PROMPT_SETS = ("chat", "code", "math", "summarisation", "long_context", "mixed")


class SweepFileError(ValueError):
    """The sweep file cannot be used; the message is `file:line: key: what, why, what to do`."""


@dataclass(frozen=True)
class Length:
    """A fixed length (`min == max`) or a range sampled uniformly per request."""

    min: int
    max: int


@dataclass(frozen=True)
class Workload:
    prompts: str                    # builtin:<set> or an absolute path
    format: str                     # jsonl | sharegpt
    num_prompts: int
    warmup_requests: int
    output_tokens: Length
    input_chars: Length | None
    temperature: float
    seed: int


@dataclass(frozen=True)
class Config:
    """One server configuration to launch. `server_flags` = the sweep's base flags + this config's
    extra flags, in that order. `where` is `file:line` of the grid/config it came from."""

    name: str
    is_baseline: bool
    model: str
    draft_model: str | None
    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    tp_size: int
    aux_layer_ids: tuple[int, ...] | None
    server_flags: tuple[str, ...]
    extra_flags: tuple[str, ...]
    where: str
    dp_size: int = 1
    pp_size: int = 1
    speculative_config: str | None = None   # vLLM: JSON of the other SpeculativeConfig fields


@dataclass(frozen=True)
class Skipped:
    description: str
    reason: str                     # `file:line: key=value ...: why; what to do`


@dataclass(frozen=True)
class Sweep:
    name: str
    path: str
    engine: str
    launch_command: tuple[str, ...] | None
    sglang_version: str | None
    model: str
    port: int | None
    env: tuple[tuple[str, str], ...]
    startup_timeout_s: float
    request_timeout_s: float
    stop_grace_s: float
    concurrency: tuple[int, ...]
    repeats: int
    workload: Workload
    configs: tuple[Config, ...]
    skipped: tuple[Skipped, ...] = field(default=())
    slurm: "slurm_settings.SlurmSettings | None" = None   # [slurm], for --executor slurm
    traffic: traffic.Traffic = traffic.Traffic()        # load levels, SLO, search (traffic.py)


# ------------------------------------------------------------------------------- types

_INT, _FLOAT, _STR, _BOOL = "an integer", "a number", "a string", "true or false"
_INT_LIST, _STR_LIST = "a list of integers", "a list of strings"

TOP_KEYS = {
    "name": _STR, "engine": _STR, "launch_command": _STR_LIST, "sglang_version": _STR,
    "model": _STR, "draft_model": _STR, "speculative_algorithm": _STR, "server_flags": _STR_LIST,
    "port": _INT, "env": "a table of strings", "startup_timeout_s": _FLOAT,
    "request_timeout_s": _FLOAT, "stop_grace_s": _FLOAT, "concurrency": _INT_LIST,
    "repeats": _INT, "workload": "a table", "grid": "an array of tables ([[grid]])",
    "config": "an array of tables ([[config]])", "slurm": "a table ([slurm])", **traffic.TOP_KEYS,
}
WORKLOAD_KEYS = {
    "prompts": _STR, "format": _STR, "num_prompts": _INT, "warmup_requests": _INT,
    "output_tokens": "an integer or {min, max}", "input_chars": "an integer or {min, max}",
    "temperature": _FLOAT, "seed": _INT,
}
CONFIG_KEYS = {
    "draft_model": _STR, "speculative_algorithm": _STR, "speculative_num_steps": _INT,
    "speculative_eagle_topk": _INT, "speculative_num_draft_tokens": _INT, "tp_size": _INT,
    "dp_size": _INT, "pp_size": _INT, "aux_layer_ids": _INT_LIST, "server_flags": _STR_LIST,
    **vllm_config.KEYS}
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
NAME_MAX = 100
RESERVED_NAME = re.compile(r"baseline(-.*)?", re.IGNORECASE)
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Flags `launch.command` sets from the sweep's keys; a second copy in server_flags would win.
OWN_FLAGS = {"--port": "port", "--host": "(always 127.0.0.1)", "--model-path": "model",
             "--model": "model", "--tp-size": "tp_size", "--tp": "tp_size",
             "--tensor-parallel-size": "tp_size", "--dp-size": "dp_size", "--dp": "dp_size",
             "--data-parallel-size": "dp_size", "--pp-size": "pp_size", "--pp": "pp_size",
             "--pipeline-parallel-size": "pp_size", "-tp": "tp_size", "-dp": "dp_size",
             "-pp": "pp_size", **{f: "num_speculative_tokens and speculative_config" for f in (
                 "--speculative-config", "-sc", "--spec-method", "--spec-model", "--spec-tokens")}}
_LIST_VALUED = {"aux_layer_ids", "server_flags"}   # values that are lists themselves

DEFAULTS = {
    "builtin": {"startup_timeout_s": 120.0, "request_timeout_s": 120.0, "stop_grace_s": 10.0},
    "sglang": {"startup_timeout_s": 900.0, "request_timeout_s": 600.0, "stop_grace_s": 30.0},
    "vllm": {"startup_timeout_s": 900.0, "request_timeout_s": 600.0, "stop_grace_s": 30.0}}


DAY_S = 86400.0
# Every number a sweep file holds, by section ("" = the top level; a [[grid]] key takes each of
# its values from the [[config]] ranges), checked by `check_numbers` wherever the key appears: in
# a list, a list of lists or a {min, max} table each number is. A new numeric key needs a line
# here (and a new section its dict); `check_number` checks one value outside these tables.
RANGES: dict[str, dict[str, Range]] = {
    "": {
        "port": Range(1, 65535, why="omit it to use a free port per config"),
        "startup_timeout_s": Range(0, DAY_S, lo_open=True),
        "request_timeout_s": Range(0, DAY_S, lo_open=True),
        "stop_grace_s": Range(0, 600, lo_open=True,
                              why="a stop waits this long before SIGKILL"),
        "concurrency": Range(1, 4096, why="requests in flight, one client thread each"),
        "repeats": Range(1, 1000),
    },
    "workload": {
        "num_prompts": Range(1, 1_000_000),
        "warmup_requests": Range(0, 10_000),
        "output_tokens": Range(1, 1_048_576),
        "input_chars": Range(1, 100_000_000),
        "temperature": Range(0.01, 2.0, also=(0,), why=(
            "0 is greedy; vLLM refuses a temperature above 2 and raises one below 0.01 to 0.01, "
            "SGLang serves one below 1e-6 greedily")),
        "seed": Range(0, 2**32 - 1),
    },
    "config": {
        "speculative_num_steps": Range(1, 64),
        "speculative_eagle_topk": Range(1, 64),
        "speculative_num_draft_tokens": Range(2, 1024), "num_speculative_tokens": Range(1, 64),
        "tp_size": Range(1, 1024), "dp_size": Range(1, 1024), "pp_size": Range(1, 1024),
        "aux_layer_ids": Range(-1, 4095, why="layer indices; -1 captures nothing"),
    },
}
RANGES["grid"] = RANGES["config"]


def check_number(value, rng: Range, where: str, key: str) -> None:
    """SweepFileError `where: key: VALUE is out of range; allowed: RANGE (why)` unless `rng`
    holds `value` (a number of the key's type; NaN and infinities never pass)."""
    if not rng.holds(value):
        raise SweepFileError(f"{where}: {rng.refusal(key, value)}")


def check_numbers(table: dict, section: str, lines: _Lines, index: int = 0) -> None:
    """Check every number of `table` (the `index`-th `[section]`) whose key has a range in
    RANGES[section], with the key's file:line in the message."""
    ranges = RANGES.get(section, {})
    for key, value in table.items():
        for v in numbers(value) if key in ranges else ():
            check_number(v, ranges[key], lines.at(section, key, index), key)


def _is(value, kind: str) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _FLOAT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _INT_LIST:
        return isinstance(value, list) and all(_is(v, _INT) for v in value)
    if kind == _STR_LIST:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return True


# ------------------------------------------------------------------------------- parsing

def load(path: str | Path) -> Sweep:
    """Parse and expand a sweep file. Raises SweepFileError with `file:line: ...`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SweepFileError(f"{path}: cannot read the sweep file: {exc.strerror}") from None
    return loads(text, str(path), base_dir=path.resolve().parent)


def loads(text: str, path: str = "<sweep>", base_dir: Path | None = None) -> Sweep:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        line = m.group(1) if m else max(1, len(text.splitlines())) if "end of document" in msg \
            else None
        where = f"{path}:{line}" if line else path
        raise SweepFileError(f"{where}: not valid TOML: {re.sub(r' ?[(]at (line|end).*', '', msg)}"
                             ) from None
    lines = _Lines(path, text)
    base_dir = base_dir or Path.cwd()
    _check_keys(data, TOP_KEYS, lines, "", 0, "the top level")

    engine = data.get("engine", "builtin")
    if engine not in ENGINES:
        raise SweepFileError(f"{lines.at('', 'engine')}: engine: {engine!r} is not one of "
                             f"{', '.join(ENGINES)}")
    if "model" not in data:
        raise SweepFileError(f"{path}:1: model: missing; name the target model, e.g. "
                             f"model = \"builtin:target\" or a local model directory")
    name = data.get("name", Path(path).stem)
    check_name(name, lines.at('', 'name'), "name")
    repeats = data.get("repeats", 1)
    try:
        tr = traffic.parse(data, lines, base_dir, repeats)
    except traffic.TrafficError as exc:
        raise SweepFileError(str(exc)) from None
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise SweepFileError(f"{lines.at('', 'env')}: env: expected a table of strings, e.g. "
                             "env = {SGLANG_LOG_MS = \"1\"}")
    for key, value in env.items():
        where = lines.at('env', key) if any(n == 'env' for n, *_ in lines.sections) \
            else lines.at('', 'env')
        if not ENV_KEY_RE.fullmatch(key):
            raise SweepFileError(f"{where}: env: {key!r} is not an environment variable name "
                                 "(letters, digits and '_', not starting with a digit)")
        if "\0" in value:
            raise SweepFileError(f"{where}: env.{key}: the value holds a NUL character")
    launch_command = data.get("launch_command")
    if launch_command is not None and not launch_command:
        raise SweepFileError(f"{lines.at('', 'launch_command')}: launch_command: must not be empty")
    for key in ("launch_command", "server_flags", "model", "draft_model", "sglang_version",
                "speculative_algorithm"):
        if key in data:
            check_argv_strings(data[key], lines.at('', key), key,
                               own_flags=key == "server_flags")
    defaults = DEFAULTS[engine]
    timeouts = {k: float(data.get(k, defaults[k]))
                for k in ("startup_timeout_s", "request_timeout_s", "stop_grace_s")}

    workload = _workload(data.get("workload", {}), lines, base_dir, engine)
    configs, skipped = _expand(data, lines, engine)
    from specwatch.run import slurm_settings   # [slurm] (a local import: it imports us)
    return Sweep(
        name=name, path=path, engine=engine,
        launch_command=tuple(launch_command) if launch_command else None,
        sglang_version=data.get("sglang_version"), model=data["model"], port=data.get("port"),
        env=tuple(sorted(env.items())), concurrency=tr.concurrency, repeats=repeats,
        workload=workload, configs=tuple(configs), skipped=tuple(skipped), **timeouts,
        slurm=slurm_settings.parse(data.get("slurm"), lines), traffic=tr)


def check_name(name: str, where: str, key: str) -> None:
    """A sweep or config name: it becomes a directory and part of run ids."""
    shown = json.dumps(name if len(name) <= 60 else name[:60] + "...")
    if len(name) > NAME_MAX:
        raise SweepFileError(f"{where}: {key}: {shown} is {len(name)} characters; at most "
                             f"{NAME_MAX} (it names a directory)")
    if not NAME_RE.fullmatch(name):
        raise SweepFileError(f"{where}: {key}: {shown} must be letters, digits, '.', '_' or '-', "
                             "starting with a letter or digit (it names a directory, so no '/', "
                             "'..' or control characters)")


def check_argv_strings(value, where: str, key: str, own_flags: bool = False) -> None:
    """Strings bound for a command line: no NUL, no newline or other control character (the
    launch line is logged), and in server_flags none of the flags specwatch sets itself."""
    for v in value if isinstance(value, list) else [value]:
        if not isinstance(v, str):
            continue
        if not v.isprintable():
            bad = next(ch for ch in v if not ch.isprintable())
            raise SweepFileError(f"{where}: {key}: {json.dumps(v)} holds the control character "
                                 f"{bad!r}; flags and paths must be printable")
        flag = v.split("=", 1)[0]
        if own_flags and flag in OWN_FLAGS:
            raise SweepFileError(f"{where}: {key}: {flag} is set by specwatch itself; use the "
                                 f"sweep key {OWN_FLAGS[flag]} instead")


def _check_keys(table: dict, known: dict[str, str], lines: _Lines, section: str, index: int,
                what: str) -> None:
    for key, value in table.items():
        if key not in known:
            raise SweepFileError(f"{lines.at(section, key, index)}: {_unknown(key, known, what)}")
        kind = known[key]
        if not _is(value, kind):
            raise SweepFileError(f"{lines.at(section, key, index)}: {key}: expected {kind}, got "
                                 f"{json.dumps(value, default=str)}")
    check_numbers(table, section, lines, index)


def _unknown(key: str, known, what: str) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{key}: unknown key in {what}{hint} (known: {', '.join(sorted(known))})"


def _length(value, lines: _Lines, key: str) -> Length:
    if isinstance(value, int) and not isinstance(value, bool):
        n = Length(value, value)
    elif isinstance(value, dict) and set(value) == {"min", "max"} and all(
            _is(v, _INT) for v in value.values()):
        n = Length(value["min"], value["max"])
    else:
        raise SweepFileError(f"{lines.at('workload', key)}: {key}: expected an integer or "
                             f"{{min = A, max = B}}, got {json.dumps(value)}")
    if n.max < n.min:
        raise SweepFileError(f"{lines.at('workload', key)}: {key}: need min <= max, got "
                             f"min={n.min}, max={n.max}")
    return n


def _workload(w: dict, lines: _Lines, base_dir: Path, engine: str) -> Workload:
    if not isinstance(w, dict):
        raise SweepFileError(f"{lines.at('', 'workload')}: workload: expected a table [workload]")
    _check_keys(w, WORKLOAD_KEYS, lines, "workload", 0, "[workload]")
    prompts = w.get("prompts", "builtin:mixed")
    fmt = w.get("format")
    if prompts.startswith(BUILTIN_PREFIX):
        set_name = prompts[len(BUILTIN_PREFIX):]
        if set_name not in PROMPT_SETS:
            raise SweepFileError(f"{lines.at('workload', 'prompts')}: prompts: no built-in prompt "
                                 f"set {set_name!r} (known: {', '.join(PROMPT_SETS)})")
        fmt = fmt or "jsonl"
    else:
        p = Path(prompts).expanduser()
        p = p if p.is_absolute() else base_dir / p
        if not p.is_file():
            raise SweepFileError(f"{lines.at('workload', 'prompts')}: prompts: {p} is not a file; "
                                 "give a JSONL or ShareGPT file, or builtin:mixed")
        prompts = str(p.resolve())
        if fmt is None:
            fmt = "sharegpt" if "conversations" in p.read_text(errors="replace")[:20000] else "jsonl"
    if fmt not in ("jsonl", "sharegpt"):
        raise SweepFileError(f"{lines.at('workload', 'format')}: format: {fmt!r} is not jsonl or "
                             "sharegpt")
    return Workload(
        prompts=prompts, format=fmt, num_prompts=w.get("num_prompts", 32),
        warmup_requests=w.get("warmup_requests", 2),
        output_tokens=_length(w.get("output_tokens", 64), lines, "output_tokens"),
        input_chars=_length(w["input_chars"], lines, "input_chars") if "input_chars" in w
        else None,
        temperature=float(w.get("temperature", 0.0)), seed=w.get("seed", 0))


# ------------------------------------------------------------------------------- expansion

def _grid_values(key: str, value, lines: _Lines, where: str) -> list:
    """The swept values of one grid key: a list of values, or one value."""
    kind = CONFIG_KEYS[key]
    if key in _LIST_VALUED:
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            values = value
        else:
            values = [value]
    else:
        values = value if isinstance(value, list) else [value]
    for v in values:
        if not _is(v, kind):
            sweepable = f"{kind} or a list of those" if key in _LIST_VALUED else \
                f"{kind} or a list of them"
            raise SweepFileError(f"{where}: {key}: expected {sweepable}, got "
                                 f"{json.dumps(value)}")
    if not values:
        raise SweepFileError(f"{where}: {key}: empty list; give at least one value")
    return values


def _expand(data: dict, lines: _Lines, engine: str) -> tuple[list[Config], list[Skipped]]:
    base_flags = tuple(data.get("server_flags", []))
    defaults = {"draft_model": data.get("draft_model"),
                "speculative_algorithm": data.get("speculative_algorithm",
                                                  "eagle3" if engine == "vllm" else "EAGLE3")}
    candidates: list[tuple[dict, str, bool]] = []   # (values, where, named explicitly)
    for section in ("grid", "config"):
        tables = data.get(section, [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise SweepFileError(f"{lines.at('', section)}: {section}: write it as [[{section}]]")
        for i, t in enumerate(tables):
            keys = CONFIG_KEYS if section == "grid" else {**CONFIG_KEYS, "name": _STR}
            for key, value in t.items():
                if key not in keys:
                    raise SweepFileError(
                        f"{lines.at(section, key, i)}: {_unknown(key, keys, f'[[{section}]]')}")
            wrong = vllm_config.engine_keys(engine, t, lambda k: lines.at(section, k, i))
            if wrong:
                raise SweepFileError(wrong)
            for key in ("server_flags", "draft_model", "speculative_algorithm"):
                if key in t:
                    check_argv_strings(t[key], lines.at(section, key, i), key,
                                       own_flags=key == "server_flags")
            if section == "config":
                _check_keys(t, keys, lines, section, i, "[[config]]")
                if "name" in t:
                    where_name = lines.at(section, "name", i)
                    check_name(t["name"], where_name, "name")
                    if RESERVED_NAME.fullmatch(t["name"]):
                        raise SweepFileError(
                            f"{where_name}: name: {t['name']!r} is reserved for the "
                            "no-speculation baselines specwatch adds; pick another name")
                candidates.append((dict(t), lines.at(section, None, i), "name" in t))
                continue
            swept = {k: _grid_values(k, v, lines, lines.at(section, k, i)) for k, v in t.items()}
            check_numbers(t, section, lines, i)
            names = list(swept)
            for combo in itertools.product(*(swept[k] for k in names)):
                candidates.append((dict(zip(names, combo)), lines.at(section, None, i), False))

    configs: list[Config] = []
    skipped: list[Skipped] = []
    seen: dict[tuple, str] = {}
    for values, where, named in candidates:
        desc = ", ".join(f"{k}={json.dumps(v)}" for k, v in values.items())
        merged = {**defaults, **values}
        reason = vllm_config.invalid(merged) if engine == "vllm" else sglang_config.invalid(merged, data)
        if reason:
            skipped.append(Skipped(desc or "(defaults)", f"{where}: {reason}"))
            continue
        merged = vllm_config.as_chain(merged) if engine == "vllm" else merged
        steps = merged.get("speculative_num_steps")
        topk = merged.get("speculative_eagle_topk")
        draft_tokens = merged.get("speculative_num_draft_tokens")
        if topk == 1 and draft_tokens is None:
            draft_tokens = steps + 1
        aux = merged.get("aux_layer_ids")
        extra = tuple(merged.get("server_flags", []))
        cfg = Config(
            name="", is_baseline=False, model=data["model"], draft_model=merged["draft_model"],
            speculative_algorithm=merged["speculative_algorithm"] if engine == "vllm"
            else merged["speculative_algorithm"].upper(),
            speculative_num_steps=steps, speculative_eagle_topk=topk,
            speculative_num_draft_tokens=draft_tokens, tp_size=merged.get("tp_size", 1),
            aux_layer_ids=tuple(aux) if aux is not None else None,
            server_flags=base_flags + extra, extra_flags=extra, where=where,
            dp_size=merged.get("dp_size", 1), pp_size=merged.get("pp_size", 1),
            speculative_config=merged.get("speculative_config_json"))
        name = values["name"] if named else _auto_name(cfg, defaults["draft_model"])
        cfg = dataclasses.replace(cfg, name=name)
        key = _identity(cfg)
        if key in seen:
            skipped.append(Skipped(desc, f"{where}: same server config as {seen[key]}"))
            continue
        if name in {c.name for c in configs}:
            raise SweepFileError(f"{where}: name: {name!r} is used by two different configs; "
                                 "give each [[config]] its own name")
        seen[key] = name
        configs.append(cfg)

    baselines = []
    for tp, dp, pp in sorted({(c.tp_size, c.dp_size, c.pp_size) for c in configs} or {(1, 1, 1)}):
        suffix = "".join(f"-{k}{n}" for k, n in (("tp", tp), ("dp", dp), ("pp", pp)) if n != 1)
        baselines.append(Config(
            name="baseline" + suffix, is_baseline=True,
            model=data["model"], draft_model=None, speculative_algorithm=None,
            speculative_num_steps=None, speculative_eagle_topk=None,
            speculative_num_draft_tokens=None, tp_size=tp, aux_layer_ids=None,
            server_flags=base_flags, extra_flags=(), where=f"{lines.path}:1",
            dp_size=dp, pp_size=pp))
    return baselines + configs, skipped


def _auto_name(c: Config, default_draft: str | None) -> str:
    name = (f"{c.speculative_algorithm}-k{c.speculative_num_steps}"   # vLLM: lower-case methods
            if c.speculative_algorithm.islower() else
            f"{c.speculative_algorithm.lower()}-s{c.speculative_num_steps}"
            f"k{c.speculative_eagle_topk}d{c.speculative_num_draft_tokens}")
    if c.draft_model and c.draft_model != default_draft:
        name += "-" + re.sub(r"[^A-Za-z0-9_.\-]", "_", c.draft_model.rstrip("/").split("/")[-1]
                             .removeprefix(BUILTIN_PREFIX))
    if c.aux_layer_ids is not None:
        name += "-aux" + "_".join(str(i) for i in c.aux_layer_ids)
    for key, n in (("tp", c.tp_size), ("dp", c.dp_size), ("pp", c.pp_size)):
        if n != 1:
            name += f"-{key}{n}"
    if c.extra_flags:
        name += "-f" + hashlib.sha1(json.dumps(c.extra_flags).encode()).hexdigest()[:6]
    return name + vllm_config.name_suffix(c.speculative_config)


def _identity(c: Config) -> tuple:
    return (c.draft_model, c.speculative_algorithm, c.speculative_num_steps,
            c.speculative_eagle_topk, c.speculative_num_draft_tokens, c.tp_size, c.dp_size,
            c.pp_size, c.aux_layer_ids, c.server_flags, c.speculative_config)
