"""Diagnoses/s of a fleet: 3 `dsdoctor serve` replicas on one PostgreSQL next to 1 replica on the
embedded SQLite store (and 1 on PostgreSQL, to tell the store from the worker count), same run, same workload (the varied real reports of bench/corpus, each
request unique, so every one is extracted, ranked, planned and stored afresh).

Each replica gets its own temporary DSDOCTOR_HOME (no shared disk); the PostgreSQL server is a
throwaway cluster on a loopback port (tests/pgserver.py). ``concurrency`` http.client connections
are spread round-robin over the replicas, as a load balancer would.

Usage: python -m bench.fleet_bench [--replicas 3] [--workers 2] [--concurrency 8] [--seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.api_bench import _request, free_port, varied_bodies, wait_for

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {"Content-Type": "application/json"}


def start(home: Path, port: int, workers: int, url: str | None) -> subprocess.Popen:
    env = {**os.environ, "DSDOCTOR_HOME": str(home)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.pop("DSDOCTOR_DATABASE_URL", None)
    if url:
        env["DSDOCTOR_DATABASE_URL"] = url
    return subprocess.Popen([sys.executable, "-m", "dsdoctor.api.cli", "serve", "--port", str(port), "--workers", str(workers)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def load(ports: list[int], seconds: float, concurrency: int) -> dict[str, float]:
    """POST /v1/diagnoses back to back from ``concurrency`` connections spread over ``ports``."""
    make = varied_bodies()
    numbers = iter(range(10**9))
    lock = threading.Lock()
    latencies: list[float] = []
    errors = [0]
    deadline = time.monotonic() + seconds

    def worker(n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", ports[n % len(ports)], timeout=60)
        mine, bad = [], 0
        while time.monotonic() < deadline:
            with lock:
                body = make(next(numbers))
            started = time.perf_counter()
            try:
                ok = _request(conn, "POST", "/v1/diagnoses", body, HEADERS) == 201
            except (OSError, http.client.HTTPException):
                conn.close()
                ok = False
            if ok:
                mine.append(time.perf_counter() - started)
            else:
                bad += 1
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {"diagnoses": len(latencies), "errors": errors[0], "per_s": len(latencies) / wall,
            "p50_ms": q[49] * 1000, "p95_ms": q[94] * 1000}


def run(label: str, replicas: int, workers: int, url: str | None, args: argparse.Namespace, root: Path) -> dict:
    ports = [free_port() for _ in range(replicas)]
    procs = [start(root / f"{label}-{n}", port, workers, url) for n, port in enumerate(ports)]
    try:
        t0 = time.monotonic()
        for port, proc in zip(ports, procs, strict=True):
            wait_for(port, proc, "/readyz", t0, seconds=180)
        load(ports, min(2.0, args.seconds), args.concurrency)  # warm-up: first requests compile and cache
        return {"label": label, "replicas": replicas, **load(ports, args.seconds, args.concurrency)}
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per replica")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    from tests.pgserver import Cluster

    cluster = Cluster()
    why = cluster.unavailable()
    if why:
        print(f"fleet bench skipped: {why}")
        return 0
    cluster.start()
    try:
        with tempfile.TemporaryDirectory(prefix="dsdoctor-fleet-") as tmp:
            rows = [run("sqlite", 1, args.workers, None, args, Path(tmp)),
                    run("postgresql", 1, args.workers, cluster.create_database(), args, Path(tmp)),
                    run("postgresql", args.replicas, args.workers, cluster.create_database(), args, Path(tmp))]
    finally:
        cluster.stop()
    print(f"POST /v1/diagnoses, varied real reports, {args.concurrency} connections, {args.seconds:g} s, "
          f"{args.workers} workers per replica, {os.cpu_count()} cores")
    print(f"{'store':<12}{'replicas':>9}{'diagnoses':>11}{'per s':>8}{'p50 ms':>9}{'p95 ms':>9}{'errors':>8}")
    for r in rows:
        print(f"{r['label']:<12}{r['replicas']:>9}{r['diagnoses']:>11}{r['per_s']:>8.1f}{r['p50_ms']:>9.1f}"
              f"{r['p95_ms']:>9.1f}{r['errors']:>8}")
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
