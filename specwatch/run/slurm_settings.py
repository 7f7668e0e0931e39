"""The sweep file's `[slurm]` table: how `run-sweep --executor slurm` asks Slurm for each config.

    [slurm]
    partition = "gpu"                   # sbatch --partition
    account = "my-project"              # sbatch --account
    time_limit_min = 60                 # per array task (one config: start-up and all its runs)
    gpus_per_node = 8                   # GPUs per array task; default each config's tp*pp*dp
                                        # (0: none, for CPU configs of the built-in engine)
    constraint = "h200"                 # sbatch --constraint
    extra_sbatch = ["--qos=high", "--cpus-per-task=16", "--exclusive"]   # more sbatch options
    setup = ["module load cuda/12.4", "source ~/venv/bin/activate"]      # shell lines the job
                                        # runs before the task
    array_parallelism = 4               # array tasks running at once (sbatch --array=...%N)
    cluster = "auto"                    # auto: Slurm when `srun` is on PATH, else local processes;
                                        # "slurm" insists; "local" runs the array tasks here

Every key is optional; without a `[slurm]` table the defaults apply. Options specwatch (through
submitit) sets itself are refused in `extra_sbatch` with the key to use instead.

Not here: submitting anything (see `slurm_executor`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from specwatch.run import sweepfile     # its checks; sweepfile imports this module in loads()
from specwatch.run.tomllines import Lines
from specwatch.run.tomlranges import Range

CLUSTERS = ("auto", "slurm", "local")
_INT, _STR, _STR_LIST = "an integer", "a string", "a list of strings"
KEYS = {"partition": _STR, "account": _STR, "time_limit_min": _INT, "gpus_per_node": _INT,
        "constraint": _STR, "extra_sbatch": _STR_LIST, "setup": _STR_LIST,
        "array_parallelism": _INT, "cluster": _STR}
# sbatch options the executor sets (submitit writes them): a second copy would fight it.
_KEY = "use the key {} instead"
OWN_OPTIONS = {
    **{o: _KEY.format("partition") for o in ("--partition", "-p")},
    **{o: _KEY.format("account") for o in ("--account", "-A")},
    **{o: _KEY.format("time_limit_min") for o in ("--time", "-t")},
    **{o: _KEY.format("constraint") for o in ("--constraint", "-C")},
    "--gpus-per-node": _KEY.format("gpus_per_node"),
    **{o: "one array task per config; use array_parallelism to cap how many run at once"
       for o in ("--array", "-a")},
    **{o: "submitit writes the job's logs into --slurm-folder"
       for o in ("--output", "-o", "--error", "-e", "--open-mode")},
    "--signal": "submitit asks for SIGUSR2 before the time limit (the task stops cleanly)",
    **{o: "the job is named after the sweep" for o in ("--job-name", "-J")},
    **{o: "each config runs on one node as one task"
       for o in ("--nodes", "-N", "--ntasks-per-node", "--ntasks", "-n")},
    "--wrap": "submitit writes the batch script",
}
DEFAULT_TIME_LIMIT_MIN = 60
# The [slurm] numbers' ranges (sweepfile.RANGES holds the other sections').
RANGES = {"time_limit_min": Range(1, 366 * 24 * 60, why="minutes per array task"),
          "gpus_per_node": Range(0, 1024, why="0 asks for no GPU (CPU configs)"),
          "array_parallelism": Range(1, 1_000_000)}


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    time_limit_min: int = DEFAULT_TIME_LIMIT_MIN
    gpus_per_node: int | None = None          # None: each config's tp*pp*dp
    constraint: str | None = None
    extra_sbatch: tuple[tuple[str, str | bool], ...] = ()   # (option without '--', value|True)
    setup: tuple[str, ...] = ()
    array_parallelism: int | None = None
    cluster: str = "auto"


def parse(table, lines: Lines) -> SlurmSettings:
    """The `[slurm]` table (or None) -> SlurmSettings; SweepFileError names file:line: key."""
    SweepFileError = sweepfile.SweepFileError
    if table is None:
        return SlurmSettings()
    if not isinstance(table, dict):
        raise SweepFileError(f"{lines.at('', 'slurm')}: slurm: expected a table [slurm]")
    sweepfile._check_keys(table, KEYS, lines, "slurm", 0, "[slurm]")

    def where(key):
        return lines.at("slurm", key)
    for key in ("partition", "account", "constraint", "setup"):
        if key in table:
            sweepfile.check_argv_strings(table[key], where(key), key)
    for key, rng in RANGES.items():
        if key in table:
            sweepfile.check_number(table[key], rng, where(key), key)
    cluster = table.get("cluster", "auto")
    if cluster not in CLUSTERS:
        raise SweepFileError(f"{where('cluster')}: cluster: {cluster!r} is not one of "
                             f"{', '.join(CLUSTERS)}")
    extra = []
    for opt in table.get("extra_sbatch", []):
        sweepfile.check_argv_strings(opt, where("extra_sbatch"), "extra_sbatch")
        name, eq, value = opt.partition("=")
        if name in OWN_OPTIONS:
            raise SweepFileError(f"{where('extra_sbatch')}: extra_sbatch: {name} is set by "
                                 f"specwatch itself: {OWN_OPTIONS[name]}")
        if not name.startswith("--") or len(name) < 3 or " " in opt:
            raise SweepFileError(f"{where('extra_sbatch')}: extra_sbatch: {json.dumps(opt)} is "
                                 "not a long sbatch option; write --name=value or --flag, e.g. "
                                 "\"--qos=high\"")
        extra.append((name[2:], value if eq else True))
    return SlurmSettings(
        partition=table.get("partition"), account=table.get("account"),
        time_limit_min=table.get("time_limit_min", DEFAULT_TIME_LIMIT_MIN),
        gpus_per_node=table.get("gpus_per_node"), constraint=table.get("constraint"),
        extra_sbatch=tuple(extra), setup=tuple(table.get("setup", [])),
        array_parallelism=table.get("array_parallelism"), cluster=cluster)
