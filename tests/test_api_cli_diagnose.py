"""`dsdoctor diagnose`: the examples its --help prints run as written on the seed cases."""

from __future__ import annotations

import glob
import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from dsdoctor.api.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def help_examples() -> list[list[str]]:
    """The example command lines of `dsdoctor diagnose --help`, continuations joined."""
    text = CliRunner().invoke(cli, ["diagnose", "--help"]).output
    block = text.split("Examples:", 1)[1].replace("\\\n", " ")
    return [shlex.split(line.strip()) for line in block.splitlines() if line.strip().startswith("dsdoctor diagnose")]


def test_help_has_examples() -> None:
    assert len(help_examples()) >= 3


@pytest.mark.parametrize("argv", help_examples(), ids=lambda a: " ".join(a[2:4])[:60])
def test_help_example_runs_as_written_on_the_seed_cases(argv, dsdoctor_home, monkeypatch) -> None:
    # issue 15: the first example merged ten unrelated cases into "100 % unexplained"
    monkeypatch.chdir(ROOT)
    args = [match for arg in argv[2:] for match in (sorted(glob.glob(arg)) if "*" in arg else [arg])]
    result = CliRunner().invoke(cli, ["diagnose", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    if "--format" in args and args[args.index("--format") + 1] == "json":
        assert json.loads(result.output)["summary"]["verdict"] != "unexplained"
    else:
        assert "No modelled root cause" not in result.output and "没有能很好解释" not in result.output
