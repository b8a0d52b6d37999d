"""Gunicorn workers booting together race to put a new diagnoses.db in WAL mode: the loser waits."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from dsdoctor.kb.storage.diagnoses import _switch_to_wal


def test_wal_switch_waits_for_a_worker_that_holds_the_database(tmp_path):
    path = tmp_path / "diagnoses.db"
    holder = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    started = time.monotonic()
    _switch_to_wal(other)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert time.monotonic() - started >= 0.2  # it waited for the holder instead of failing
    holder.close()
    other.close()


def test_wal_switch_gives_up_with_the_error_after_its_deadline(tmp_path):
    path = tmp_path / "diagnoses.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _switch_to_wal(other, seconds=0.2)
    holder.execute("COMMIT")
    holder.close()
    other.close()
