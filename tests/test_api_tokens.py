"""API tokens on both backends: stored as hashes only, created/listed/revoked from the CLI
(kb/storage/tokens.py, api/cli_token.py)."""

from __future__ import annotations

import sqlite3

import pytest

from dsdoctor.api.cli import main
from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.kb.storage.tokens import SCOPES, TokenStore, hash_token, parse_scopes


def test_create_verify_revoke(dsdoctor_home, store_backend) -> None:
    store = TokenStore(dsdoctor_home)
    assert store.count() == 0 and store.list() == []
    secret, info = store.create("ci", "diagnose,incidents:read")
    assert secret.startswith("dsd_") and len(secret) > 40
    assert info.scopes == ("diagnose", "incidents:read")
    assert store.verify(secret).name == "ci"
    assert store.verify(secret + "x") is None
    assert store.verify("") is None
    assert [t.name for t in store.list()] == ["ci"]
    store.revoke("ci")
    assert store.verify(secret) is None and store.count() == 0


def test_only_the_hash_is_stored(dsdoctor_home) -> None:
    store = TokenStore(dsdoctor_home)
    secret, _ = store.create("bot", ["admin"])
    raw = store.path.read_bytes()
    assert secret.encode() not in raw
    rows = sqlite3.connect(store.path).execute("SELECT hash FROM tokens").fetchall()
    assert rows == [(hash_token(secret),)]


def test_admin_carries_every_scope(dsdoctor_home, store_backend) -> None:
    _, info = TokenStore(dsdoctor_home).create("root", "admin")
    assert all(info.allows(scope) for scope in SCOPES)
    _, reader = TokenStore(dsdoctor_home).create("reader", "incidents:read")
    assert reader.allows("incidents:read") and not reader.allows("incidents:write")


@pytest.mark.parametrize(("raw", "message"), [("", "no scope"), ("diagnose,root", "unknown scope 'root'"),
                                              ("read", "unknown scope")])
def test_scope_errors_name_the_valid_scopes(raw: str, message: str) -> None:
    with pytest.raises(DsdoctorError, match=message) as caught:
        parse_scopes(raw)
    assert "incidents:write" in str(caught.value)


def test_duplicate_and_bad_names(dsdoctor_home, store_backend) -> None:
    store = TokenStore(dsdoctor_home)
    store.create("ci", "diagnose")
    with pytest.raises(DsdoctorError, match="exists"):
        store.create("ci", "diagnose")
    with pytest.raises(DsdoctorError, match="token name"):
        store.create("has space", "diagnose")
    with pytest.raises(DsdoctorError, match="no token named 'nope'; tokens: ci"):
        store.revoke("nope")


def test_cli_prints_the_token_once_on_the_last_line(dsdoctor_home, store_backend, capsys) -> None:
    assert main(["token", "create", "--name", "pipeline", "--scope", "diagnose", "--scope", "incidents:write"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    secret = out[-1]
    assert secret.startswith("dsd_")
    info = TokenStore(dsdoctor_home).verify(secret)
    assert info is not None and info.scopes == ("diagnose", "incidents:write")
    assert main(["token", "list"]) == 0
    listing = capsys.readouterr().out
    assert "pipeline" in listing and secret not in listing and "incidents:write" in listing
    assert main(["token", "revoke", "pipeline"]) == 0
    assert TokenStore(dsdoctor_home).verify(secret) is None
    assert main(["token", "revoke", "pipeline"]) == 2
    assert "no token named" in capsys.readouterr().err


def test_cli_refuses_unknown_scope(capsys) -> None:
    assert main(["token", "create", "--name", "x", "--scope", "superuser"]) == 2
    assert "scopes are: diagnose, incidents:read, incidents:write, admin" in capsys.readouterr().err


def test_issue14_tokens_may_expire(dsdoctor_home, capsys) -> None:
    import datetime as dt
    import sqlite3

    from dsdoctor.api.cli import main
    from dsdoctor.kb.storage.tokens import parse_duration

    assert parse_duration("30d") == dt.timedelta(days=30) and parse_duration("90m") == dt.timedelta(minutes=90)
    for bad in ("30", "0d", "d", "3y", "-1d"):
        with pytest.raises(DsdoctorError, match="90m, 12h, 30d or 2w"):
            parse_duration(bad)
    assert main(["token", "create", "--name", "ci", "--scope", "diagnose", "--expires", "30d"]) == 0
    out = capsys.readouterr().out
    secret = out.strip().splitlines()[-1]
    store = TokenStore(dsdoctor_home)
    assert "valid until" in out and store.verify(secret) is not None
    assert store.list()[0].expires_at is not None
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE tokens SET expires_at = '2000-01-01T00:00:00Z'")
    conn.close()
    assert store.verify(secret) is None
    assert main(["token", "create", "--name", "bad", "--scope", "diagnose", "--expires", "soon"]) != 0
