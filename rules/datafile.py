"""Small helpers for checks whose knowledge lives in one YAML file of rules/data/: load it once, and
compile its caseless RE2 patterns once."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import re2

from dsdoctor.kb import snapshot
from dsdoctor.kb.yamlload import load_file
from dsdoctor.rules.matcher import re2_options


@functools.lru_cache(maxsize=16)
def load(path: Path) -> dict[str, Any]:
    """The mapping in ``path``, parsed once per process (a broken shipped file is a bug: it raises); a
    snapshot where the CLI keeps them (kb/snapshot.py), so a small diagnosis does not import PyYAML."""
    return snapshot.cached(f"data-{path.stem}", lambda: [path], ("dsdoctor.kb.yamlload",), lambda: _parse(path))


def _parse(path: Path) -> dict[str, Any]:
    data, problems = load_file(path)
    if problems or not isinstance(data, dict):
        raise ValueError(f"{path}: {problems}")
    return data


@functools.lru_cache(maxsize=256)
def caseless(pattern: str) -> Any:
    """``pattern`` compiled by RE2, caseless, UTF-8 (linear time on untrusted text)."""
    return re2.compile(pattern, re2_options(caseless=True, utf8=True))
