"""Move an embedded store (the SQLite files of a data directory) into PostgreSQL without loss.

Rows keep their ids, times, versions and history; diagnoses go in their original order, so the new
store lists them newest first as before (cursors handed out by the old store do not carry over).
Copying again adds nothing: a row whose id is already there is left alone. After the copy every
source row is read back from PostgreSQL and compared, so the counts printed are checked, not hoped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsdoctor.kb.storage.backend import PostgresBackend, SqliteBackend, StorageError, check_url, postgres
from dsdoctor.kb.storage.diagnoses import FILE_NAME as DIAGNOSES_FILE
from dsdoctor.kb.storage.tokens import FILE_NAME as TOKENS_FILE

DIAGNOSIS_COLUMNS = ("id", "created_at", "updated_at", "top_cause", "top_probability", "verdict", "summary", "lang",
                     "top_n", "version", "evidence", "diagnosis", "history", "job_id", "cluster", "job")
TOKEN_COLUMNS = ("name", "hash", "prefix", "scopes", "created_at", "expires_at")
BATCH = 500
#: the embedded incident store's file (kb.incidents copies it: this layer sits below kb.incidents)
INCIDENTS_FILE = "incidents.db"


def parse_source(text: str) -> Path:
    """``sqlite:PATH`` (a data directory, DSDOCTOR_HOME) -> PATH; anything else is an error saying what to write."""
    kind, sep, path = text.partition(":")
    if not sep or kind != "sqlite" or not path:
        raise StorageError(f"--from {text!r}: write sqlite:PATH, PATH being a data directory (DSDOCTOR_HOME)")
    home = Path(path).expanduser()
    if not home.is_dir():
        raise StorageError(f"--from {text!r}: {home} is not a directory")
    if not any((home / name).exists() for name in (DIAGNOSES_FILE, TOKENS_FILE, INCIDENTS_FILE)):
        raise StorageError(f"--from {text!r}: {home} holds none of {DIAGNOSES_FILE}, {TOKENS_FILE}, {INCIDENTS_FILE}")
    return home


def _rows(source: SqliteBackend, table: str, columns: tuple[str, ...], order: str) -> list[tuple[Any, ...]]:
    if not source.exists():
        return []
    present = {row[1] for row in source.execute(f"PRAGMA table_info({table})")}
    if not present:
        return []
    # a version-1 diagnoses.db has no job columns, a tokens.db from before expiries no expires_at
    select = ", ".join(c if c in present else f"NULL AS {c}" for c in columns)
    return source.execute(f"SELECT {select} FROM {table} ORDER BY {order}").fetchall()


def _copy_table(rows: list[tuple[Any, ...]], dest: PostgresBackend, table: str, columns: tuple[str, ...],
                key: str) -> dict[str, int]:
    marks = ", ".join(["%s"] * len(columns))
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT ({key}) DO NOTHING"
    before = int(dest.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    for start in range(0, len(rows), BATCH):
        with dest.transaction() as conn, conn.raw.cursor() as cur:
            cur.executemany(sql, [tuple(r) for r in rows[start : start + BATCH]])
    added = int(dest.execute(f"SELECT count(*) FROM {table}").fetchone()[0]) - before
    return {"source": len(rows), "copied": added, "already_there": len(rows) - added,
            "verified": _verify(rows, dest, table, columns, key)}


def _verify(rows: list[tuple[Any, ...]], dest: PostgresBackend, table: str, columns: tuple[str, ...],
            key: str) -> int:
    """How many source rows PostgreSQL now holds with exactly the same values."""
    index = columns.index(key)
    same = 0
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        got = {r[index]: tuple(r) for r in dest.execute(
            f"SELECT {', '.join(columns)} FROM {table} WHERE {key} = ANY(?)", ([r[index] for r in chunk],)).fetchall()}
        same += sum(1 for r in chunk if _normal(got.get(r[index])) == _normal(tuple(r)))
    return same


def _normal(row: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    return None if row is None else tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)


def copy(source_home: Path, dest_url: str) -> dict[str, dict[str, int]]:
    """Copy the diagnoses and tokens of ``source_home`` into the PostgreSQL database at ``dest_url``
    (migrated first); return per table: source, copied, already_there, verified. A verified count
    below the source count is a StorageError naming the table (a row with the same id but other
    content was already there)."""
    dest = postgres(check_url(dest_url))
    report = {
        "diagnoses": _copy_table(_rows(SqliteBackend(source_home / DIAGNOSES_FILE), "diagnoses", DIAGNOSIS_COLUMNS,
                                       "seq"), dest, "diagnoses", DIAGNOSIS_COLUMNS, "id"),
        "tokens": _copy_table(_rows(SqliteBackend(source_home / TOKENS_FILE), "tokens", TOKEN_COLUMNS, "name"),
                              dest, "tokens", TOKEN_COLUMNS, "name"),
    }
    for table, counts in report.items():
        if counts["verified"] != counts["source"]:
            raise StorageError(f"{table}: {counts['source'] - counts['verified']} of {counts['source']} rows differ "
                               "in PostgreSQL (the same id with other content was there before the copy)")
    return report
