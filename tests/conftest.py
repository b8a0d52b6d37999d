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
    monkeypatch.delenv("DSDOCTOR_DATABASE_URL", raising=False)
    return home


@pytest.fixture(scope="session")
def pg_cluster():
    """A PostgreSQL server of this test session on a loopback port (skips, saying why, when none can start)."""
    from tests.pgserver import Cluster

    cluster = Cluster()
    why = cluster.unavailable()
    if why:
        pytest.skip(f"PostgreSQL tests skipped: {why}")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster, monkeypatch: pytest.MonkeyPatch):
    """A fresh PostgreSQL database, named by DSDOCTOR_DATABASE_URL for the test."""
    from dsdoctor.kb.storage import backend

    url = pg_cluster.create_database()
    monkeypatch.setenv("DSDOCTOR_DATABASE_URL", url)
    yield url
    backend.forget(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(request: pytest.FixtureRequest) -> str:
    """Run a store test on both backends: the embedded SQLite files, then a fresh PostgreSQL database."""
    if request.param == "postgresql":
        request.getfixturevalue("pg_url")
    return request.param


@pytest.fixture
def other_database(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Stores opened from now on use another, empty database on PostgreSQL (on SQLite their own
    folder already is one): a test that moves incidents between two stores."""
    if "store_backend" in request.fixturenames and request.getfixturevalue("store_backend") == "postgresql":
        from dsdoctor.kb.storage import backend

        url = request.getfixturevalue("pg_cluster").create_database()
        monkeypatch.setenv("DSDOCTOR_DATABASE_URL", url)
        yield url
        backend.forget(url)
    else:
        yield None


@pytest.fixture(scope="session")
def real_kb():
    """The built-in knowledge base, loaded once for the whole session."""
    from dsdoctor.kb.loader import load_kb

    return load_kb(overlays=[])
