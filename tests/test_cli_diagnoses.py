"""The CLI as a client of a running server: `dsdoctor diagnose --server`, `dsdoctor diagnoses
list|show|observe` (api/cli_diagnoses.py, api/client.py), and local diagnoses saying they are not stored."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from dsdoctor.api.cli import main
from dsdoctor.kb.storage.tokens import TokenStore
from tests.test_api_support import NAN_LOG, make_app


@pytest.fixture
def server(dsdoctor_home: Path):
    """The API (test knowledge base) on a loopback port, in a thread."""
    app = make_app(dsdoctor_home)
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", app
    httpd.shutdown()
    app.extensions["dsdoctor"]["services"].close()


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "rank3.log"
    path.write_text(NAN_LOG, encoding="utf-8")
    return path


def test_diagnose_on_a_server_prints_the_stored_id_and_page(server, tmp_path, capsys) -> None:
    url, app = server
    rc, out, err = run(capsys, "diagnose", str(_log(tmp_path)), "--server", url, "--job-id", "48213",
                       "--cluster", "a100-east", "--run-url", "https://runs.example/48213", "--label", "team=pretrain")
    assert rc == 0, err
    items, _ = app.extensions["dsdoctor"]["services"].diagnoses().list()
    did = items[0]["id"]
    assert f"dsdoctor diagnosis {did}" in out and f"stored as {did}" in out
    assert f"page: {url}/diagnoses/{did}" in out
    assert "Job: 48213 @ a100-east  https://runs.example/48213  team=pretrain" in out
    assert items[0]["job"] == {"id": "48213", "cluster": "a100-east", "run_url": "https://runs.example/48213",
                               "labels": {"team": "pretrain"}}


def test_list_filters_by_job_and_cluster_then_show_and_observe(server, tmp_path, capsys) -> None:
    url, _app = server
    log = str(_log(tmp_path))
    for job_id, cluster in (("1", "east"), ("2", "west")):
        assert run(capsys, "diagnose", log, "--server", url, "--job-id", job_id, "--cluster", cluster)[0] == 0
    rc, out, _ = run(capsys, "diagnoses", "list", "--server", url, "--cluster", "west")
    assert rc == 0 and len(out.splitlines()) == 1 and "[2 @ west]" in out
    did = out.split()[0]
    rc, out, _ = run(capsys, "diagnoses", "list", "--server", url, "--job-id", "1", "--format", "json")
    assert rc == 0 and '"cluster": "east"' in out and did not in out
    rc, out, _ = run(capsys, "diagnoses", "show", did, "--server", url, "--format", "markdown")
    assert rc == 0 and f"## dsdoctor diagnosis `{did}`" in out and "**Job**: 2 @ west" in out
    rc, out, _ = run(capsys, "diagnoses", "observe", did, "s.fp16_overflow_repeated", "--server", url,
                     "--format", "json")
    assert rc == 0 and '"s.fp16_overflow_repeated": true' in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_one_line(capsys) -> None:
    port = _free_port()
    rc, out, err = run(capsys, "diagnoses", "list", "--server", f"http://127.0.0.1:{port}")
    assert rc != 0 and out == ""
    assert err == f"dsdoctor: error: cannot reach http://127.0.0.1:{port}: connection refused " \
                  "(is `dsdoctor serve` running there?)\n"


def test_http_errors_are_one_line_each(server, dsdoctor_home, tmp_path, capsys) -> None:
    url, app = server
    rc, _, err = run(capsys, "diagnoses", "show", "nope", "--server", url)
    assert rc != 0 and "HTTP 404" in err and "no diagnosis with id 'nope'" in err and len(err.splitlines()) == 1
    reader = TokenStore(dsdoctor_home).create("reader", "incidents:read")[0]
    rc, _, err = run(capsys, "diagnoses", "list", "--server", url)
    assert rc != 0 and "HTTP 401" in err and "--token" in err and len(err.splitlines()) == 1
    rc, _, err = run(capsys, "diagnoses", "list", "--server", url, "--token", reader)
    assert rc != 0 and "HTTP 403" in err and len(err.splitlines()) == 1
    app.config["MAX_CONTENT_LENGTH"] = 1000
    big = tmp_path / "big.log"  # random text: the client gzips bodies, so it must stay big once compressed
    big.write_text("".join(random.Random(1).choice("abcdefghij \n") for _ in range(200_000)), encoding="utf-8")
    diag = TokenStore(dsdoctor_home).create("diag", "diagnose")[0]
    rc, _, err = run(capsys, "diagnose", str(big), "--server", url, "--token", diag)
    assert rc != 0 and "HTTP 413" in err and len(err.splitlines()) == 1


def test_bad_server_url_and_bad_label(capsys) -> None:
    rc, _, err = run(capsys, "diagnoses", "list", "--server", "localhost:8000")
    assert rc != 0 and "--server must be an http(s) URL" in err
    rc, _, err = run(capsys, "diagnose", "--describe", "x", "--label", "oops", "--server", "http://127.0.0.1:1")
    assert rc != 0 and "--label 'oops': write KEY=VALUE" in err
    rc, _, err = run(capsys, "diagnose", "--describe", "x", "--run-url", "ftp://x", "--server", "http://127.0.0.1:1")
    assert rc != 0 and "job.run_url: run_url must be an http(s) URL" in err


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_local_diagnosis_says_it_is_not_stored(fmt, capsys) -> None:
    rc, out, err = run(capsys, "diagnose", "--describe", "CUDA out of memory on rank 3", "--format", fmt,
                       "--job-id", "77")
    assert rc == 0, err
    head = out.splitlines()[0]
    assert "local only, not stored" in head and "dsdoctor diagnosis d" not in out and "`d" not in head
    assert "77" in out


def test_a_bad_job_in_the_evidence_file_is_one_line(tmp_path, capsys) -> None:
    evidence = tmp_path / "evidence.json"
    evidence.write_text('{"description": "x", "job": "48213"}', encoding="utf-8")
    rc, _, err = run(capsys, "diagnose", "--evidence", str(evidence), "--job-id", "1")
    assert rc != 0 and err == "dsdoctor: error: job must be an object with id, name, cluster, run_url, labels; got str\n"
