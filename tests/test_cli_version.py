"""`dsdoctor --version` (api/cli.py, api/version.py)."""

from __future__ import annotations

from importlib.metadata import version

from dsdoctor.api.cli import main


def test_version_flag_prints_the_package_version(capsys) -> None:
    for flag in ("--version", "-V"):
        assert main([flag]) == 0
        assert capsys.readouterr().out == f"dsdoctor {version('dsdoctor')}\n"
