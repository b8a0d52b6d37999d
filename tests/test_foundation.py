"""The project's ground rules: CLI shape, documented commands and settings, data directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dsdoctor.api.cli import cli, main
from dsdoctor.api.settings import ENVIRONMENT, home
from tests.docs_text import DOCS

ROOT = Path(__file__).resolve().parent.parent
README = DOCS  # README.md and docs/*.md together
README_ONLY = (ROOT / "README.md").read_text(encoding="utf-8")


def _walk(command: click.Command, prefix: tuple[str, ...] = ()):
    yield prefix, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _walk(sub, (*prefix, name))


ALL_COMMANDS = [path for path, _ in _walk(cli) if path]


def test_top_level_subcommands_exist():
    assert {"serve", "diagnose", "kb", "rules", "incidents", "token"} <= set(cli.commands)


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p))
def test_every_command_is_documented_in_readme(path):
    assert f"dsdoctor {' '.join(path)}" in README, f"neither README nor docs/ mentions `dsdoctor {' '.join(path)}`"


@pytest.mark.parametrize("path", [(), *ALL_COMMANDS], ids=lambda p: " ".join(p) or "dsdoctor")
def test_every_command_has_useful_help(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) >= 3


@pytest.mark.parametrize("variable", sorted(ENVIRONMENT))
def test_every_environment_variable_is_documented(variable):
    assert variable in README


def test_readme_has_exactly_the_two_setup_commands():
    assert "make run" in README_ONLY and "make test" in README_ONLY


def test_errors_are_one_line_without_traceback(capsys):
    code = main(["diagnose", "--evidence", "/nonexistent/evidence.json"])
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_subcommand_is_a_clear_error(capsys):
    assert main(["no-such-command"]) != 0
    assert "No such command" in capsys.readouterr().err


def test_home_is_created_on_first_use(dsdoctor_home):
    assert not dsdoctor_home.exists()
    assert home() == dsdoctor_home and dsdoctor_home.is_dir()


def test_console_script_runs():
    exe = Path(sys.executable).with_name("dsdoctor")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "diagnose" in out.stdout


def test_makefile_targets_and_ci():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run:", "test:", "lint:", "bench:"):
        assert re.search(rf"^{target}", makefile, re.M), target
    assert "make test" in (ROOT / ".ci" / "run").read_text()
