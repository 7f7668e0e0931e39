"""Every command is documented: its --help has a description and ends with an example."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from specwatch.cli import cli

COMMANDS = sorted(cli.commands)


def test_all_commands_present():
    assert set(COMMANDS) >= {"parse", "ingest", "sql", "report", "tail", "serve", "run-sweep",
                             "dashboard", "doctor", "align"}


@pytest.mark.parametrize("name", COMMANDS)
def test_help_ends_with_example(name):
    doc = cli.commands[name].help or ""
    assert len(doc.split()) > 8, f"{name} has no real description"
    assert doc.strip().splitlines()[-1].strip().startswith("Example: specwatch " + name)
    if name != "serve":  # serve passes --help on to the engine
        out = CliRunner().invoke(cli, [name, "--help"])
        assert out.exit_code == 0 and "Example:" in out.output
