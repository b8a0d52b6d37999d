"""Many replicas on one PostgreSQL: 8 writers across 3 `dsdoctor serve` processes, each with its own
data directory (no shared disk), one of them SIGKILLed mid-run. Every acknowledged diagnosis is
stored once and readable through every surviving replica; a token made once is seen by all."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.test_api_serve import ROOT, free_port, wait_healthy
from tests.test_api_support import EVIDENCE

pytestmark = pytest.mark.slow
WRITERS, PER_WRITER, REPLICAS, KILLED = 8, 24, 3, 2
# a replica killed mid-answer can break the socket (OSError) or cut the answer after its headers
# (http.client.IncompleteRead, an HTTPException): either way the request went unanswered
CONNECTION_LOST = (OSError, http.client.HTTPException)


def _start(home, port: int, url: str) -> subprocess.Popen:
    env = {**os.environ, "DSDOCTOR_HOME": str(home), "DSDOCTOR_DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    # a session of its own: SIGKILL goes to the gunicorn master and its workers at once, like a lost machine
    return subprocess.Popen([sys.executable, "-m", "dsdoctor.api.cli", "serve", "--port", str(port), "--workers", "2"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)


@contextlib.contextmanager
def _replicas(tmp_path, url: str) -> Iterator[tuple[list[int], list[subprocess.Popen]]]:
    """REPLICAS `dsdoctor serve` processes on one database, each with its own data directory; all
    stopped at the end, the SIGKILLed one included."""
    ports = [free_port() for _ in range(REPLICAS)]
    procs = [_start(tmp_path / f"replica{n}", port, url) for n, port in enumerate(ports)]
    try:
        for port, proc in zip(ports, procs, strict=True):
            wait_healthy(port, proc, seconds=90)
        for port, proc in zip(ports, procs, strict=True):
            _wait_ready(port, proc)
        yield ports, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _wait_ready(port: int, proc: subprocess.Popen, seconds: float = 600.0, in_a_row: int = 6) -> None:
    """Wait until /readyz says ready ``in_a_row`` times running, as a load balancer's readiness probe
    would before routing writes: each worker compiles the rules on its own warm-up thread, and a
    cold replica on a loaded machine can take minutes before its first diagnosis."""
    started, streak = time.monotonic(), 0
    while time.monotonic() - started < seconds:
        if proc.poll() is not None:
            pytest.fail(f"replica on port {port} exited while warming up")
        try:
            streak = streak + 1 if _request(port, "GET", "/readyz")[0] == 200 else 0
        except CONNECTION_LOST:
            streak = 0
        if streak >= in_a_row:
            return
        time.sleep(0.2)
    pytest.fail(f"replica on port {port} was not ready within {seconds} s")


def _request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


class Unanswered(Exception):
    """Sent, but the connection was lost before an answer: the write may or may not be stored."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.port = port


def _post_to_a_replica(ports: list[int], start: int, path: str, body: dict,
                       refused: list[int] | None = None) -> tuple[int, dict] | None:
    """POST to the replicas in turn from `start` until one answers; (port, answer), None if none was reached.

    Only a refused connection moves on (nothing reached a server); a lost one raises Unanswered and is
    never retried, since that could store the write twice."""
    for attempt in range(len(ports)):
        port = ports[(start + attempt) % len(ports)]
        try:
            status, answer = _request(port, "POST", path, body)
        except ConnectionRefusedError:
            if refused is not None:
                refused.append(port)  # list.append is atomic: writers share the list without a lock
            continue
        except CONNECTION_LOST as exc:
            raise Unanswered(port) from exc
        assert status == 201, (port, status, answer)
        return port, answer
    return None


def test_eight_writers_three_replicas_one_killed(pg_cluster, tmp_path, monkeypatch) -> None:
    url = pg_cluster.create_database()
    with _replicas(tmp_path, url) as (ports, procs):
        acknowledged: dict[str, str] = {}  # job id -> diagnosis id
        unknown: list[tuple[str, int]] = []  # sent, connection lost before an answer: may or may not be stored
        refused: list[int] = []  # ports that refused a connection (the dead replica)
        answered_by: dict[int, int] = dict.fromkeys(ports, 0)
        lock = threading.Lock()
        done = threading.Semaphore(0)

        errors: list[str] = []

        def writer(w: int) -> None:
            try:
                write(w)
            except BaseException as exc:
                errors.append(f"writer {w}: {exc!r}")

        def write(w: int) -> None:
            for n in range(PER_WRITER):
                job = f"w{w}-{n}"
                try:
                    sent = _post_to_a_replica(ports, w + n, "/v1/diagnoses", {**EVIDENCE, "job": {"id": job}}, refused)
                except Unanswered as lost:
                    with lock:
                        unknown.append((job, lost.port))
                else:
                    if sent:
                        with lock:
                            acknowledged[job] = sent[1]["id"]
                            answered_by[sent[0]] += 1
                done.release()

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for _ in range(WRITERS * PER_WRITER // 3):  # a third of the writes in: the replica's machine dies
            done.acquire(timeout=120)
        os.killpg(procs[KILLED].pid, signal.SIGKILL)
        procs[KILLED].wait(30)
        for t in threads:
            t.join(300)

        assert errors == []
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT job_id, id FROM diagnoses").fetchall()
        stored_jobs = [job for job, _ in stored]
        lost = {job for job in acknowledged if job not in stored_jobs}
        duplicated = {job for job in stored_jobs if stored_jobs.count(job) > 1}
        assert len(acknowledged) + len(unknown) == WRITERS * PER_WRITER
        # a request whose connection broke may or may not be stored, but never twice; the dead replica
        # holds most of them (a survivor's worker can also drop one when the machine is overloaded)
        assert any(port == ports[KILLED] for _, port in unknown) or answered_by[ports[KILLED]] > 0
        assert all(stored_jobs.count(job) <= 1 for job, _ in unknown)
        assert lost == set() and duplicated == set()
        assert answered_by[ports[KILLED]] > 0 and set(refused) == {ports[KILLED]}  # it died mid-run
        assert {job: did for job, did in stored if job in acknowledged} == acknowledged
        for port in (p for n, p in enumerate(ports) if n != KILLED):  # every survivor sees every write at once
            for job, did in acknowledged.items():
                status, page = _request(port, "GET", f"/v1/diagnoses?job_id={job}")
                assert status == 200 and [i["id"] for i in page["items"]] == [did], (port, job, page)

        # a token created once closes every surviving replica at once (no per-replica token file)
        from dsdoctor.kb.storage.tokens import TokenStore

        monkeypatch.setenv("DSDOCTOR_DATABASE_URL", url)
        TokenStore(tmp_path / "admin").create("fleet", "diagnose")
        for port in (p for n, p in enumerate(ports) if n != KILLED):
            assert _request(port, "GET", "/v1/diagnoses")[0] == 401


def test_incidents_eight_writers_three_replicas_one_killed(pg_cluster, tmp_path, monkeypatch) -> None:
    """Incidents through 3 replicas (8 writers, one replica SIGKILLed mid-run): every acknowledged incident
    is stored once, and a search through another replica finds it as soon as its write is answered."""
    url = pg_cluster.create_database()
    with _replicas(tmp_path, url) as (ports, procs):
        acknowledged: dict[str, str] = {}  # marker -> incident id
        unknown: list[tuple[str, int]] = []
        not_found_at_once: list[tuple[str, int, dict]] = []
        answered_by: dict[int, int] = dict.fromkeys(ports, 0)
        lock = threading.Lock()
        done = threading.Semaphore(0)
        errors: list[str] = []
        dead = threading.Event()

        def search_elsewhere(marker: str, wrote_to: int) -> None:
            for port in ports:
                if port == wrote_to or (dead.is_set() and port == ports[KILLED]):
                    continue
                try:
                    status, page = _request(port, "GET", f"/v1/incidents?q={marker}")
                except CONNECTION_LOST:
                    continue  # the replica that is being killed
                if status != 200 or [i["title"] for i in page["items"]] != [f"Fleet write {marker}"]:
                    with lock:
                        not_found_at_once.append((marker, port, page))
                return  # one other replica is enough per write; every survivor is checked at the end

        def write(w: int) -> None:
            for n in range(PER_WRITER):
                marker = f"fw{w}x{n}"  # one index term, unique per write
                body = {"title": f"Fleet write {marker}", "phenomenon": "NCCL watchdog timeout on rank 3",
                        "root_cause": "comm.slow_rank_exceeds_timeout", "status": "resolved", "fix": "raised the timeout"}
                try:
                    sent = _post_to_a_replica(ports, w + n, "/v1/incidents", body)
                except Unanswered as lost:
                    with lock:
                        unknown.append((marker, lost.port))
                else:
                    if sent:
                        with lock:
                            acknowledged[marker] = sent[1]["id"]
                            answered_by[sent[0]] += 1
                        search_elsewhere(marker, sent[0])
                done.release()

        def writer(w: int) -> None:
            try:
                write(w)
            except BaseException as exc:
                errors.append(f"writer {w}: {exc!r}")

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for _ in range(WRITERS * PER_WRITER // 3):
            done.acquire(timeout=120)
        os.killpg(procs[KILLED].pid, signal.SIGKILL)
        dead.set()
        procs[KILLED].wait(30)
        for t in threads:
            t.join(300)

        assert errors == []
        with psycopg.connect(url) as conn:
            stored = conn.execute("SELECT title, id FROM incidents WHERE starts_with(title, 'Fleet write ')").fetchall()
        stored_markers = [title.removeprefix("Fleet write ") for title, _ in stored]
        lost = {m for m in acknowledged if m not in stored_markers}
        duplicated = {m for m in stored_markers if stored_markers.count(m) > 1}
        assert len(acknowledged) + len(unknown) == WRITERS * PER_WRITER
        assert lost == set() and duplicated == set()
        assert answered_by[ports[KILLED]] > 0  # it died mid-run, after answering some
        assert not_found_at_once == []
        survivors = [p for n, p in enumerate(ports) if n != KILLED]
        for port in survivors:  # every survivor finds every acknowledged incident
            for marker, iid in acknowledged.items():
                status, page = _request(port, "GET", f"/v1/incidents?q={marker}")
                assert status == 200 and [i["id"] for i in page["items"]] == [iid], (port, marker, page)
        # site priors come from the shared rows: the same counts whichever replica asks
        monkeypatch.setenv("DSDOCTOR_DATABASE_URL", url)
        from dsdoctor.kb.incidents import IncidentStore

        with IncidentStore(tmp_path / "admin", seed=False) as store:
            counts = store.site_cause_counts()
        assert counts.get("comm.slow_rank_exceeds_timeout") == len(set(stored_markers))
        facets = [_request(port, "GET", "/v1/incidents?q=watchdog&limit=1")[1]["facets"] for port in survivors]
        assert all(f == facets[0] for f in facets)
