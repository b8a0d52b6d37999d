"""Shared fixtures: an isolated data directory for every test."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def dsdoctor_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test writes into its own DSDOCTOR_HOME and user cache directory and sees no site overlays."""
    home = tmp_path / "home"
    monkeypatch.setenv("DSDOCTOR_HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("DSDOCTOR_CONFIG", raising=False)
    monkeypatch.delenv("DSDOCTOR_KB_PATH", raising=False)
    return home


@pytest.fixture(scope="session")
def real_kb():
    """The built-in knowledge base, loaded once for the whole session."""
    from kb.loader import load_kb

    return load_kb(overlays=[])
