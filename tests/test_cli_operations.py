"""Day-to-day operation of the CLI and server: caches in the user cache directory, the TOML config
file, the progress bar on stderr, a busy port (api/settings.py, api/config.py, api/cli_serve.py,
api/server.py, api/cli_diagnose.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest

from dsdoctor.api import config
from dsdoctor.api.cli import main
from dsdoctor.api.server import check_port_free


def test_diagnose_leaves_nothing_in_the_folder_it_runs_in(tmp_path) -> None:
    """A fresh process, as a user runs it (in-process the compiled rules may already be in memory)."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DSDOCTOR_HOME"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "user-cache")
    done = subprocess.run([sys.executable, "-m", "dsdoctor.api.cli", "diagnose", "--describe",
                           "torch.OutOfMemoryError: CUDA out of memory on rank 3"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "local only, not stored" in done.stdout
    assert list(work.iterdir()) == []
    assert any((tmp_path / "user-cache" / "dsdoctor" / "rules").iterdir())  # compiled rules, for next time


def test_the_progress_bar_draws_on_stderr_while_stdout_is_redirected(monkeypatch, capsys) -> None:
    import dsdoctor.api.cli_diagnose as cli_diagnose

    monkeypatch.setattr(cli_diagnose, "PROGRESS_THRESHOLD", 0)
    monkeypatch.setattr(cli_diagnose.sys.stderr, "isatty", lambda: True, raising=False)
    with cli_diagnose._progress(10) as advance:
        advance(10)
    out, err = capsys.readouterr()
    assert out == "" and "reading logs" in err


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_config_fills_unset_variables_and_the_environment_wins(tmp_path) -> None:
    path = _write(tmp_path / "dsdoctor.toml", 'kb_path = ["/a", "/b"]\nmax_body_mb = 8\n'
                                              'slack_signing_secret = "s"\n[serve]\nport = 8123\n')
    env = {"DSDOCTOR_CONFIG": str(path), "DSDOCTOR_MAX_BODY_MB": "64"}
    assert config.apply(env) == {"port": 8123}
    assert env["DSDOCTOR_KB_PATH"] == "/a:/b" and env["DSDOCTOR_MAX_BODY_MB"] == "64"
    assert env["DSDOCTOR_SLACK_SIGNING_SECRET"] == "s"


def test_config_is_found_in_the_data_directory(dsdoctor_home) -> None:
    _write(dsdoctor_home / "dsdoctor.toml", "max_body_mb = 4\n")
    env = {"DSDOCTOR_HOME": str(dsdoctor_home)}
    config.apply(env)
    assert env == {"DSDOCTOR_HOME": str(dsdoctor_home), "DSDOCTOR_MAX_BODY_MB": "4"}


@pytest.mark.parametrize(("text", "message"), [
    ("colour = 1\n", "unknown key 'colour'; allowed: home, kb_path, max_body_mb, slack_signing_secret, [serve]"),
    ("max_body_mb = 'big'\n", "max_body_mb must be an integer or a number, got 'big'"),
    ("[serve]\nport = 99999\n", "serve.port must be between 0 and 65535, got 99999"),
    ("[serve]\nthreads = 4\n", "unknown key serve.threads; allowed: host, port, workers"),
    ("home = \n", "not valid TOML"),
])
def test_a_bad_config_file_is_one_line_naming_the_file_and_key(tmp_path, monkeypatch, capsys, text, message) -> None:
    path = _write(tmp_path / "bad.toml", text)
    monkeypatch.setenv("DSDOCTOR_CONFIG", str(path))
    assert main(["serve"]) != 0
    err = capsys.readouterr().err
    assert err.startswith(f"dsdoctor: error: {path}: ") and message in err and len(err.splitlines()) == 1


def test_a_missing_config_file_is_an_error(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DSDOCTOR_CONFIG", str(tmp_path / "nope.toml"))
    assert main(["serve"]) != 0
    assert f"DSDOCTOR_CONFIG={tmp_path / 'nope.toml'}: no such file" in capsys.readouterr().err


def test_serve_takes_defaults_from_the_config_and_flags_win(tmp_path, monkeypatch) -> None:
    import dsdoctor.api.server

    calls = []
    monkeypatch.setattr(dsdoctor.api.server, "run_server", lambda **kw: calls.append(kw))
    monkeypatch.setenv("DSDOCTOR_CONFIG", str(_write(tmp_path / "c.toml", "[serve]\nport = 8123\nworkers = 3\n")))
    assert main(["serve"]) == 0 and main(["serve", "--port", "9000"]) == 0
    assert calls == [{"host": "127.0.0.1", "port": 8123, "workers": 3, "insecure": False},
                     {"host": "127.0.0.1", "port": 9000, "workers": 3, "insecure": False}]


def test_a_busy_port_is_one_line(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(click.ClickException) as caught:
            check_port_free("127.0.0.1", port)
        assert caught.value.message == (f"port {port} is in use; try PORT={port + 1} make run "
                                        f"(or dsdoctor serve --port {port + 1})")
        assert main(["serve", "--port", str(port)]) == 1
        assert capsys.readouterr().err == f"Error: {caught.value.message}\n"
    check_port_free("127.0.0.1", port)  # free again: no error
