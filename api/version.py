"""The package version, read once from the installed distribution's metadata."""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "dsdoctor"


@cache
def package_version() -> str:
    """``dsdoctor``'s version as installed (pyproject.toml); ``0+unknown`` when run from an uninstalled tree."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
