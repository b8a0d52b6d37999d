"""Shared fixtures of the knowledge-base tests: a writable copy of the fixture KB and a text edit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dsdoctor.kb import loader

FIXTURE = Path(__file__).parent / "fixtures" / "kb"


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    """No site overlays, and no parsed file cached from another test."""
    monkeypatch.delenv("DSDOCTOR_KB_PATH", raising=False)
    loader.clear_cache()
    yield
    loader.clear_cache()


@pytest.fixture
def kbdir(tmp_path) -> Path:
    """A writable copy of the fixture base layer."""
    dst = tmp_path / "data"
    shutil.copytree(FIXTURE / "data", dst)
    return dst


def edit(path: Path, old: str, new: str) -> None:
    """Replace the first ``old`` in a file (which must hold it) by ``new``."""
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
