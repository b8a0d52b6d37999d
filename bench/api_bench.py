"""Throughput and latency of the REST API: POST /v1/diagnoses with a 100 KB multi-rank log, next to
GET /healthz, against `dsdoctor serve --workers 4` on loopback (same server, same run).

The server runs as a subprocess with its own temporary DSDOCTOR_HOME; a thread pool of
http.client connections (bounded count, bounded time, loopback only) sends requests back to
back. Reports requests/s, p50, p99 and errors per endpoint. Goal on 2 cores: >= 150 diagnoses/s
with p99 < 100 ms.

Runs ``--rounds`` rounds of /healthz then POST, interleaved, and reports each round and the medians
(the machine's speed drifts; a slow minute then hits both endpoints of a round).

Two POST workloads per round: "same failure" (64 logs of one failure: the engine's ranking memo
answers after the first) and "varied" (the real reports of bench/corpus, each request made unique
by a nonce in its description and in ``environment.versions``, which the ranking memo keys on:
every request is extracted, ranked and planned afresh).

Usage: python -m bench.api_bench [--workers 4] [--concurrency 8] [--seconds 10] [--log-kb 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_CONCURRENCY = 64
MAX_SECONDS = 120
DISTINCT_LOGS = 64
_NUMBERS = itertools.count()  # request numbers of the varied workload (next() is atomic under the GIL)


def multi_rank_log(size: int, ranks: int = 8, seed: int = 7) -> str:
    """About ``size`` bytes of an 8-rank DeepSpeed job: progress, NCCL setup, then rank 3 OOMs and
    the other ranks' watchdogs time out on the collective it never joined."""
    rng = random.Random(seed)
    lines: list[str] = []
    for rank in range(ranks):
        lines.append(f"node1:{4100 + rank}:{4100 + rank} [{rank}] NCCL INFO NCCL version 2.20.5+cuda12.1")
        lines.append(f"node1:{4100 + rank}:{4200 + rank} [{rank}] NCCL INFO Channel 00/02 : 0 1 2 3 4 5 6 7")
    step, written = 0, sum(len(x) + 1 for x in lines)
    tail = 3000
    while written < size - tail:
        step += 1
        rank = rng.randrange(ranks)
        line = (f"[rank{rank}]:[2024-05-01 10:{step // 60 % 60:02d}:{step % 60:02d},{rng.randrange(1000):03d}] "
                f"[INFO] [engine.py:2156:_report_progress] [Rank {rank}] step={step}, skipped=0, lr=[0.0001], "
                f"mom=[(0.9, 0.95)] loss={2.0 + rng.random():.4f}")
        lines.append(line)
        written += len(line) + 1
    lines.append("[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
                 "capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has "
                 "78.11 GiB memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.10 GiB "
                 "is reserved by PyTorch but unallocated.")
    for rank in (0, 1, 2, 4, 5, 6, 7):
        lines.append(f"[rank{rank}]:[E501 10:59:59.123456 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught "
                     f"collective operation timeout: WorkNCCL(SeqNum={step}, OpType=ALLREDUCE, NumelIn=1048576, "
                     f"NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")
    return "\n".join(lines) + "\n"


def varied_bodies() -> Callable[[int], bytes]:
    """Request ``n``: the evidence of real report ``n mod N`` of bench/corpus, unique for every ``n``."""
    from bench.corpus import CORPUS_DIR, load_cases

    cases = [c.evidence for c in load_cases(CORPUS_DIR)]
    if not cases:
        raise RuntimeError(f"no corpus cases under {CORPUS_DIR}")
    run = random.Random().randrange(1 << 30)  # another run against a reused store is unique too

    def body(n: int) -> bytes:
        evidence = json.loads(json.dumps(cases[n % len(cases)]))
        evidence["description"] = f"{evidence.get('description', '')} (report {run}.{n})"
        env = evidence.setdefault("environment", {})
        env["versions"] = {**env.get("versions", {}), "bench_nonce": f"{run}.{n}"}
        return json.dumps(evidence).encode()

    return body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
             headers: dict[str, str]) -> int:
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    if response.getheader("Connection", "").lower() == "close":
        conn.close()  # sync workers close after each response; http.client reopens on the next request
    return response.status


def process_tree_cpu(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and its children (Linux /proc; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == root or ppid == root:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_load(port: int, method: str, path: str, bodies: list[bytes | None] | Callable[[int], bytes],
             headers: dict[str, str], seconds: float, concurrency: int, server_pid: int | None = None
             ) -> dict[str, float]:
    """Send requests back to back from ``concurrency`` connections for ``seconds``, each connection
    cycling through ``bodies`` from its own offset (a function: request ``n`` of the run, never the
    same ``n`` twice); summarise."""
    if callable(bodies):
        make, numbers = bodies, _NUMBERS
        bodies = [None]
    else:
        make = numbers = None
    deadline = time.monotonic() + seconds
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine, bad = [], []
        sent = offset
        while time.monotonic() < deadline:
            body = make(next(numbers)) if make is not None else bodies[sent % len(bodies)]
            sent += 1
            started = time.perf_counter()
            try:
                status = _request(conn, method, path, body, headers)
            except (OSError, http.client.HTTPException):
                conn.close()
                status = 0
            elapsed = time.perf_counter() - started
            if status // 100 == 2:
                mine.append(elapsed)
            else:
                bad.append(status)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors.extend(bad)

    server_cpu = process_tree_cpu(server_pid) if server_pid else 0.0
    client_cpu = time.process_time()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for n in range(concurrency):
            pool.submit(worker, n * len(bodies) // concurrency)
    wall = time.monotonic() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu = (process_tree_cpu(server_pid) - server_cpu) if server_pid else float("nan")
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")

    done = max(1, len(latencies) + len(errors))
    return {"requests": len(latencies), "errors": len(errors), "rps": len(latencies) / wall, "p50_ms": pct(0.50),
            "p99_ms": pct(0.99), "seconds": wall, "server_cpu_ms": server_cpu * 1000 / done,
            "client_cpu_ms": client_cpu * 1000 / done}


def start_server(home: Path, port: int, workers: int) -> subprocess.Popen:
    env = {**os.environ, "DSDOCTOR_HOME": str(home)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "dsdoctor.api.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def wait_for(port: int, proc: subprocess.Popen, path: str, started: float, seconds: float = 90.0) -> float:
    """Seconds from ``started`` until ``path`` answers 200."""
    while time.monotonic() - started < seconds:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            if _request(conn, "GET", path, None, {}) == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server did not answer {path} with 200 within {seconds:g} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes (default 4)")
    parser.add_argument("--concurrency", type=int, default=8, help=f"client connections (1-{MAX_CONCURRENCY})")
    parser.add_argument("--seconds", type=float, default=8.0, help=f"duration of each phase (max {MAX_SECONDS})")
    parser.add_argument("--log-kb", type=int, default=100, help="size of the multi-rank log in KB")
    parser.add_argument("--ready-timeout", type=float, default=90.0,
                        help="seconds to wait for /readyz (the server compiles its rules in a fresh home; default 90)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of /healthz then POST (medians are reported)")
    args = parser.parse_args(argv)
    concurrency = max(1, min(MAX_CONCURRENCY, args.concurrency))
    seconds = max(1.0, min(MAX_SECONDS, args.seconds))
    args.rounds = max(1, min(10, args.rounds))

    # a different log in every request (seeded: other steps, losses, ranks in between), the same failure
    texts = [multi_rank_log(args.log_kb * 1024, seed=seed) for seed in range(DISTINCT_LOGS)]
    payloads: list[bytes | None] = [
        json.dumps({"description": "8-rank job died at step ~1200", "logs": [{"source": "job.log", "text": text}]}
                   ).encode() for text in texts]
    payload, text = payloads[0], texts[0]
    varied = varied_bodies()
    json_headers = {"Content-Type": "application/json"}
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dsdoctor-api-bench-") as home:
        started = time.monotonic()
        proc = start_server(Path(home), port, args.workers)
        try:
            boot = wait_for(port, proc, "/healthz", started)
            ready = wait_for(port, proc, "/readyz", started, args.ready_timeout)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status = _request(conn, "POST", "/v1/diagnoses", payload, json_headers)
            if status != 201:
                conn.request("POST", "/v1/diagnoses", body=payload, headers=json_headers)
                raise RuntimeError(f"POST /v1/diagnoses answered {status}: {conn.getresponse().read()[:500]!r}")
            run_load(port, "POST", "/v1/diagnoses", payloads, json_headers, 2.0, concurrency)  # warm every worker
            rounds = []
            for _ in range(args.rounds):  # interleaved, so a slow minute of the machine hits both endpoints
                health = run_load(port, "GET", "/healthz", [None], {}, seconds, concurrency, proc.pid)
                diagnose = run_load(port, "POST", "/v1/diagnoses", payloads, json_headers, seconds, concurrency,
                                    proc.pid)
                unique = run_load(port, "POST", "/v1/diagnoses", varied, json_headers, seconds, concurrency,
                                  proc.pid)
                rounds.append((diagnose, health, unique))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    cores = os.cpu_count()
    print(f"api_bench: dsdoctor serve --workers {args.workers} on 127.0.0.1, {concurrency} connections, "
          f"{seconds:g} s per phase, {cores} CPU cores; /healthz answered {boot:.1f} s and /readyz "
          f"{ready:.1f} s after start")
    print(f"  every POST sends one of {DISTINCT_LOGS} different logs of the same failure (rank 3 OOM, the others' "
          f"watchdogs time out)")
    print(f"  {'round':<6} {'endpoint':<44} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}   CPU ms/request")
    print("  varied: every POST is a different real report of bench/corpus, made unique (no memo answers)")
    post_name = f"POST /v1/diagnoses ({len(payload) // 1024} KB, {len(text.splitlines())} lines)"
    varied_name = f"POST /v1/diagnoses varied (~{len(varied(0)) / 1024:.1f} KB)"
    for number, (diagnose, health, unique) in enumerate(rounds, 1):
        for name, r in ((post_name, diagnose), ("GET /healthz", health), (varied_name, unique)):
            print(f"  {number:<6} {name:<44} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['errors']:>7}   "
                  f"server {r['server_cpu_ms']:.1f}, client {r['client_cpu_ms']:.1f}")
    rps = statistics.median(d["rps"] for d, _, _ in rounds)
    p99 = statistics.median(d["p99_ms"] for d, _, _ in rounds)
    ratio = statistics.median(d["rps"] / h["rps"] for d, h, _ in rounds)
    varied_rps = statistics.median(v["rps"] for _, _, v in rounds)
    varied_p99 = statistics.median(v["p99_ms"] for _, _, v in rounds)
    print(f"  median of {len(rounds)} rounds: same failure {rps:.1f} diagnoses/s, p99 {p99:.1f} ms; "
          f"varied unique {varied_rps:.1f} diagnoses/s, p99 {varied_p99:.1f} ms; "
          f"same-failure diagnoses per /healthz request: {ratio:.3f}")
    goal = rps >= 150 and p99 < 100 and varied_rps >= 150
    print(f"  goal (>= 150 diagnoses/s on both workloads, p99 < 100 ms, medians): {'met' if goal else 'not met'}")
    errors = sum(d["errors"] + h["errors"] + v["errors"] for d, h, v in rounds)
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
