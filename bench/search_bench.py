"""Incident search benchmark: full reindex time and query latency, Whoosh next to PostgreSQL and SQLite FTS5.

    python -m bench.search_bench               # 100,000 incidents (several minutes)
    python -m bench.search_bench --n 10000 --json bench/out/search_10k.json
    python -m bench.search_bench --n 100000 --skip-fts5 --pg   # Whoosh and PostgreSQL side by side

Generates N synthetic incidents (mixed Chinese/English, about 1 KB of UTF-8 text each, with
log lines, identifiers and numbers), bulk-imports them into a fresh store, then measures:

* the full Whoosh reindex (``IncidentStore.reindex``; parallel segment writers on every core);
* ``IncidentStore.search`` latency (p50/p95/max) over a query mix: Chinese, English, identifiers,
  phrases, OR/NOT, filters, the empty query and second pages — end to end, with facets, SQLite
  hydration and highlights;
* with ``--pg`` (a throwaway PostgreSQL from tests/pgserver.py, or ``--pg-url``), the same incidents
  in the PostgreSQL incident store: load time (segmenting on every core), then the same query mix
  through ``IncidentStore.search``, end to end, every query with its document frequencies counted
  again (as if asked first);
* the same data in SQLite FTS5 (contentless, jieba-segmented with the same analyzer, bm25 with
  the same field weights): build time, and latency of top-20 + total + the two facet counts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Log lines as jobs print them, one list per domain; {slots} are filled at random.
LOG_LINES = {
    "memory": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {gib}.00 GiB. GPU {gpu} has a total capacity "
        "of 79.15 GiB of which {small} MiB is free.",
        "{n} pytorch allocator cache flushes since last step. this happens when there is high memory pressure",
        "Out of memory: Killed process {pid} (python) total-vm:{kb}kB",
        "MA {a} GB Max_MA {b} GB CA {c} GB Max_CA {d} GB",
    ],
    "comm": [
        "[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
        "NumelIn={n}, NumelOut={n}, Timeout(ms)=1800000) ran for {ms} milliseconds before timing out.",
        "{host}:{pid}:{pid} [{gpu}] NCCL INFO NET/Socket : Using [0]{iface}:10.{a}.{b}.{c}<0>",
        "NET/IB : Got completion from peer 10.{a}.{b}.{c}<{port}> with status=12 opcode=0 len=0 vendor err 129",
        "Error while creating shared memory segment /dev/shm/nccl-{word} (size {kb})",
    ],
    "compute": [
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {half}",
        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        "step {step}: loss=nan grad_norm=inf lr={lr}",
        "CUBLAS_STATUS_NOT_SUPPORTED when calling cublasGemmEx with CUDA_R_16BF",
    ],
    "data": [
        "RuntimeError: DataLoader timed out after {secs} seconds",
        "Assertion `srcIndex < srcSelectDimSize` failed. CUDA error: device-side assert triggered",
        "DataLoader worker (pid {pid}) is killed by signal: Bus error.",
        "data time {secs}.{n} s of step time {b}.{c} s",
    ],
    "hardware": [
        "NVRM: Xid (PCI:0000:{a}:00): 79, pid={pid}, name=python, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:{a}:00): 48, pid={pid}, name=python, An uncorrectable double bit error",
        "ibstat: mlx5_{gpu} State: Down; link_downed counter {n}",
        "clocks_event_reasons.hw_thermal_slowdown: Active on GPU {gpu} at {temp} C",
    ],
    "config": [
        "AssertionError: Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
        "gradient_acc_step * world_size {a} != {b} * {c} * {d}",
        "train.py: error: unrecognized arguments: --local_rank={gpu}",
        "RuntimeError: Error building extension 'cpu_adam' ninja: build stopped: subcommand failed.",
        "Mismatched NCCL version detected : rank {rank} version 21805 rank 0 version 22005",
    ],
    "none": ["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"],
}
def _words(text: str) -> list[str]:
    return text.split()


# Everyday words of incident write-ups, most frequent first (drawn with Zipf weights).
EN_WORDS = _words("the job run rank node step training after error restart again log cluster users team saw minutes "
            "hours config version upgrade script pipeline nightly failed started stopped slow fast first last "
            "only every other same different new old image container scheduler queue allocation reservation "
            "weekend night morning release branch commit experiment baseline reference dataset shard epoch "
            "evaluation inference throughput latency dashboard alert ticket oncall vendor driver kernel firmware "
            "storage network switch rack power cooling reboot drain resume rollback patch workaround owner "
            "priority deadline budget quota capacity usage report review postmortem followup action item")
ZH_WORDS = _words("训练 作业 节点 日志 报错 重启 集群 配置 升级 脚本 用户 排查 发现 问题 再次 小时 分钟 任务 模型 数据 "
            "机器 显卡 网络 存储 镜像 容器 调度 队列 版本 回滚 补丁 规避 负责人 值班 告警 面板 工单 厂商 驱动 "
            "内核 固件 交换机 机柜 供电 散热 重新 提交 恢复 下线 验证 复现 对比 基线 实验 评估 推理 吞吐 延迟 "
            "周末 夜间 上午 发布 分支 数据集 分片 轮次 复盘 改进 行动项 优先级 容量 配额 使用率 报告")
MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "qwen-7b", "qwen-14b",
          "qwen-72b", "mistral-7b", "mixtral-8x7b", "yi-34b", "baichuan2-13b", "chatglm3-6b", "deepseek-67b",
          "gpt-neox-20b", "bloom-7b1", "falcon-40b", "mpt-30b", "t5-11b", "bert-large", "vit-huge", "deit-base",
          "cosyvoice", "whisper-large", "sdxl", "cogvideox"]
TAGS = ["oom", "nccl", "checkpoint", "timeout", "hardware", "fp16", "dataloader", "zero3", "network", "xid",
        "performance", "container", "resume", "launcher", "roce", "slurm", "k8s", "nfs", "sft", "pretrain"]
SEVERITIES = ["critical", "high", "medium", "low"]
IFACES = ["docker0", "lo", "virbr0", "eth1", "bond0", "ib0"]

QUERIES: list[tuple[str, dict[str, Any]]] = [
    # Chinese: words of one cause, a longer phrase, a broad word with a filter
    ("显存碎片", {}), ("看门狗 超时", {}), ("保存检查点", {}), ("共享内存", {}), ("学习率 warmup", {}),
    ("两台机器 卡住", {"domain": "comm"}), ("显存", {"severity": "critical"}), ("数据加载 GPU 利用率", {}),
    # English: words of one cause, identifiers, phrases, OR / NOT, broad words with filters
    ("fragmentation", {}), ("watchdog timeout", {}), ("fallen off the bus", {}), ("NCCL_SOCKET_IFNAME", {}),
    ("loss scale minimum", {}), ('"out of memory"', {}), ("Xid OR ECC", {}), ("timeout NOT checkpoint", {}),
    ("tokenizer embedding", {"domain": "data"}), ("thermal straggler", {"since": "2024-06-01"}),
    ("OOM", {"domain": "memory", "since": "2024-01-01", "until": "2024-12-31"}), ("nccl", {"tag": "network"}),
    ("rank", {}), ("llama-3-70b checkpoint", {}), ("gpu-a12", {}), ("status=12 completion", {}),
    # no text: newest first with filters
    ("", {}), ("", {"domain": "hardware"}), ("", {"cause": "memory.fragmentation", "since": "2024-03-01"}),
]


def _zipf_words(rng: random.Random, words: list[str], k: int) -> list[str]:
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    return rng.choices(words, weights=weights, k=k)


def _slots(rng: random.Random) -> dict[str, Any]:
    return {"gib": rng.randint(1, 40), "gpu": rng.randint(0, 7), "small": rng.randint(2, 900),
            "n": rng.randint(1, 4096), "pid": rng.randint(1000, 400000), "kb": rng.randint(10**5, 10**9),
            "a": rng.randint(1, 255), "b": rng.randint(1, 64), "c": rng.randint(1, 32), "d": rng.randint(1, 512),
            "rank": rng.randint(0, 1023), "seq": rng.randint(1, 10**6), "ms": rng.randint(600000, 3600000),
            "host": _host(rng), "iface": rng.choice(IFACES), "port": rng.randint(20000, 60000),
            "word": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=6)),
            "scale": 2 ** rng.randint(1, 16), "half": 2 ** rng.randint(0, 15), "step": rng.randint(1, 200000),
            "lr": f"{rng.choice([1, 2, 3, 5])}e-{rng.randint(4, 6)}", "secs": rng.randint(30, 1800),
            "temp": rng.randint(80, 95)}


def _host(rng: random.Random) -> str:
    return f"gpu-{rng.choice('abcdefghijk')}{rng.randint(1, 64):02d}"


def _clauses(text: str) -> list[str]:
    import re

    return [c.strip() for c in re.split(r"[;,()；，（）、]", text) if len(c.strip()) > 3]


def generate(n: int, causes: dict[str, Any], seed: int = 7) -> list[dict[str, Any]]:
    """N synthetic incidents of about 1 KB of UTF-8 text, half written in Chinese, half in English.

    Each incident is about one catalog cause: its title and root-cause text reuse clauses of that
    cause's description (so a cause's own words find mostly its incidents), its phenomenon a log
    line of the cause's domain, and the rest everyday words drawn with Zipf weights, models,
    hosts and numbers - a long-tailed vocabulary like real write-ups, not a few repeated templates.
    """
    rng = random.Random(seed)
    ids = sorted(causes)
    out = []
    for i in range(n):
        cause = ids[rng.randrange(len(ids))]
        entry = causes[cause]
        domain = cause.split(".", 1)[0]
        zh = i % 2 == 0
        own = _clauses(entry.zh if zh else entry.en) or [entry.en]
        other = _clauses(entry.en if zh else entry.zh) or [entry.zh]
        words = ZH_WORDS if zh else EN_WORDS
        joiner = "" if zh else " "
        model, host = rng.choice(MODELS), _host(rng)

        def filler(k: int, words: list[str] = words, joiner: str = joiner) -> str:
            return joiner.join(_zipf_words(rng, words, k))

        title = f"{rng.choice(own)} {model} {host}"[:150]
        log_line = rng.choice(LOG_LINES[domain]).format(**_slots(rng))
        phenomenon = "\n".join([log_line, filler(18) + joiner + rng.choice(own), filler(14),
                                 rng.choice(LOG_LINES[rng.choice(list(LOG_LINES))]).format(**_slots(rng))])
        out.append({
            "id": f"B{i:07d}",
            "title": title,
            "phenomenon": phenomenon,
            "scope": f"{filler(4)} {host} rank {rng.randint(0, 511)}",
            "root_cause": cause,
            "root_cause_detail": joiner.join(rng.sample(own, min(2, len(own)))) + " / " + rng.choice(other),
            "fix": filler(10) + joiner + rng.choice(other),
            "regression": filler(9),
            "prevention": filler(9),
            "severity": rng.choice(SEVERITIES),
            "status": rng.choice(["resolved", "resolved", "resolved", "open"]),
            "tags": rng.sample(TAGS, 2),
            "occurred_at": f"{rng.randint(2023, 2025)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
                           f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            "author": rng.choice(["zhang.wei", "li.na", "m.keller", "r.patel", "ops.oncall", "o.ivanova"]),
            "job": {"cluster": rng.choice(["a100-pool", "h100-east", "k8s-train", "roce-b"]),
                    "world_size": 8 * rng.randint(1, 64), "model": model},
        })
    return out


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {"p50_ms": round(pick(0.5) * 1000, 2), "p95_ms": round(pick(0.95) * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2), "mean_ms": round(statistics.fmean(ordered) * 1000, 2)}


def _dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20, 1)


# ---------------------------------------------------------------- Whoosh (the real store)


def _time_query(store: Any, q: str, filters: dict[str, Any], samples: list[float],
                per_query: dict[str, list[float]], per_kind: dict[str, list[float]]) -> int:
    """Time one search (and its second page when there is one) into the sample lists; the match count."""
    t = time.perf_counter()
    result = store.search(q, **filters)
    dt = time.perf_counter() - t
    samples.append(dt)
    per_query.setdefault(f"{q!r} {filters or ''}".strip(), []).append(dt)
    kind = "empty" if not q else ("chinese" if any("\u4e00" <= c <= "\u9fff" for c in q) else "english")
    per_kind[kind].append(dt)
    if result["next_cursor"]:
        t = time.perf_counter()
        store.search(q, cursor=result["next_cursor"], **filters)
        dt = time.perf_counter() - t
        samples.append(dt)
        per_kind["page2"].append(dt)
    return result["total"]


def bench_whoosh(home: Path, lines: list[str], causes: list[str], repeats: int, procs: int,
                 reuse: bool = False, cold: bool = False) -> dict[str, Any]:
    from dsdoctor.kb.incidents import IncidentStore

    store = IncidentStore(home, valid_causes=set(causes), seed=False)
    import_s = reindex_s = reindex_cpu_s = 0.0
    indexed = store.count()
    if not (reuse and indexed == len(lines) and store.index_lag() == 0):
        started = time.perf_counter()
        store.import_jsonl(lines, sync_index=False)
        import_s = time.perf_counter() - started
        started, cpu_started, children_started = time.perf_counter(), time.process_time(), _children_cpu()
        indexed = store.reindex(procs=procs)
        reindex_s = time.perf_counter() - started
        reindex_cpu_s = time.process_time() - cpu_started + _children_cpu() - children_started
    store.warm_up()
    for q, filters in QUERIES:  # per-generation caches (columns, field lengths) fill once
        store.search(q, **filters)
    samples: list[float] = []
    per_kind: dict[str, list[float]] = {"chinese": [], "english": [], "empty": [], "page2": []}
    matches: list[int] = []
    per_query: dict[str, list[float]] = {}
    for _ in range(repeats):
        for q, filters in QUERIES:
            _forget_results(store, cold)  # every query runs as if asked for the first time
            matches.append(_time_query(store, q, filters, samples, per_query, per_kind))
    repeated: list[float] = []
    for q, filters in QUERIES:  # a query asked again: its ranking comes from the per-generation cache
        store.search(q, **filters)
        t = time.perf_counter()
        store.search(q, **filters)
        repeated.append(time.perf_counter() - t)
    store.close()
    return {"import_s": round(import_s, 1), "indexed": indexed, "reindex_s": round(reindex_s, 1),
            "reindex_cpu_s": round(reindex_cpu_s, 1),
            "docs_per_s": round(indexed / reindex_s) if reindex_s else None, "index_mb": _dir_mb(home / "incidents-index"),
            "search": _percentiles(samples), "by_kind": {k: _percentiles(v) for k, v in per_kind.items() if v},
            "repeated_query": _percentiles(repeated), "queries": len(samples),
            "slowest": sorted(((round(statistics.median(v) * 1000, 1), k) for k, v in per_query.items()),
                              reverse=True)[:6],
            "matches_per_query": {"median": sorted(matches)[len(matches) // 2], "max": max(matches)}}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _forget_results(store: Any, cold: bool = False) -> None:
    """Drop cached rankings and segmentations so the next search does all of its work; ``cold``:
    the decoded postings of frequent terms too (kept across queries by the store)."""
    from dsdoctor.kb.incidents import fastscore
    from dsdoctor.kb.incidents.analyzer import _han_words

    if cold:
        fastscore.forget_hot()

    cache = store.indexer.searcher().__dict__.get("_dsdoctor_cache", {})
    for key in [k for k in cache if k[0] in ("rank", "allowed")]:
        del cache[key]
    _han_words.cache_clear()


# ---------------------------------------------------------------- PostgreSQL (the real store)


def _pg_row(line: str) -> tuple:
    from dsdoctor.kb.incidents.pgstore import row_values
    from dsdoctor.kb.incidents.record import validate_new

    return row_values(validate_new(json.loads(line), None))


def bench_postgres(url: str, lines: list[str], causes: list[str], repeats: int, procs: int) -> dict[str, Any]:
    """Load the incidents into the PostgreSQL store (rows built on every core, as an import builds them one
    by one) and time the query mix through ``IncidentStore.search``."""
    import psycopg

    from dsdoctor.kb.incidents import IncidentStore
    from dsdoctor.kb.incidents.pgstore import INSERT
    from dsdoctor.kb.storage import backend

    os.environ["DSDOCTOR_DATABASE_URL"] = url
    try:
        store = IncidentStore(Path(tempfile.mkdtemp(prefix="dsdoctor-pg-bench-")), valid_causes=set(causes),
                              seed=False)
        started = time.perf_counter()
        if store.count() != len(lines):
            with multiprocessing.get_context("fork").Pool(procs) as pool:
                rows = pool.map(_pg_row, lines, chunksize=500)
            with psycopg.connect(url) as conn, conn.cursor() as cur:
                cur.execute("TRUNCATE incidents")
                for start in range(0, len(rows), 2000):
                    cur.executemany(INSERT.replace("?", "%s"), rows[start : start + 2000])
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE incidents")  # GIN pending lists merged, statistics for the planner
        load_s = time.perf_counter() - started
        with psycopg.connect(url) as conn:
            db_mb = round(conn.execute("SELECT pg_total_relation_size('incidents')").fetchone()[0] / 2**20, 1)
        store.warm_up()
        for q, filters in QUERIES:
            store.search(q, **filters)
        samples: list[float] = []
        per_kind: dict[str, list[float]] = {"chinese": [], "english": [], "empty": [], "page2": []}
        per_query: dict[str, list[float]] = {}
        for _ in range(repeats):
            for q, filters in QUERIES:
                store._data.freqs.forget()  # every query counts its terms' documents again
                _time_query(store, q, filters, samples, per_query, per_kind)
        repeated: list[float] = []
        for q, filters in QUERIES:  # document frequencies cached (for a minute, by this process)
            store.search(q, **filters)
            t = time.perf_counter()
            store.search(q, **filters)
            repeated.append(time.perf_counter() - t)
        indexed = store.count()
        store.close()
    finally:
        os.environ.pop("DSDOCTOR_DATABASE_URL", None)
        backend.forget(url)
    return {"load_s": round(load_s, 1), "indexed": indexed, "db_mb": db_mb, "search": _percentiles(samples),
            "by_kind": {k: _percentiles(v) for k, v in per_kind.items() if v},
            "repeated_query": _percentiles(repeated), "queries": len(samples),
            "slowest": sorted(((round(statistics.median(v) * 1000, 1), k) for k, v in per_query.items()),
                              reverse=True)[:6]}


def _postgres_url(args: argparse.Namespace, stack: contextlib.ExitStack) -> str | None:
    """``--pg-url``, or a throwaway cluster (tests/pgserver.py) stopped when the run ends."""
    if args.pg_url:
        return args.pg_url
    from tests.pgserver import Cluster

    cluster = Cluster()
    why = cluster.unavailable()
    if why:
        print(f"postgresql: skipped ({why})")
        return None
    cluster.start()
    stack.callback(cluster.stop)
    return cluster.create_database()


# ---------------------------------------------------------------- SQLite FTS5 (same segmentation)


def _segment_row(record: dict[str, Any]) -> tuple:
    from dsdoctor.kb.incidents.analyzer import segment
    from dsdoctor.kb.incidents.indexer import body_text
    from dsdoctor.kb.incidents.record import validate_new

    r = validate_new(record, None)
    return (r["id"], segment(r["title"]), segment(r["phenomenon"]),
            segment(f"{r['root_cause']}\n{r['root_cause_detail']}"), segment(body_text(r)), r["root_cause"],
            r["domain"], r["severity"], r["occurred_at"])


def bench_fts5(path: Path, records: list[dict[str, Any]], repeats: int, procs: int) -> dict[str, Any]:
    from dsdoctor.kb.incidents.analyzer import segment

    db = sqlite3.connect(str(path))
    db.executescript("""
        PRAGMA journal_mode = wal;
        CREATE TABLE meta (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE, root_cause TEXT, domain TEXT,
                           severity TEXT, occurred_at TEXT);
        CREATE VIRTUAL TABLE fts USING fts5(title, phenomenon, cause, body, content='', columnsize=1,
                                            tokenize="unicode61 remove_diacritics 0");
    """)
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        rows = pool.map(_segment_row, records, chunksize=500)
    with db:
        for rowid, row in enumerate(rows, 1):
            db.execute("INSERT INTO meta VALUES (?, ?, ?, ?, ?, ?)", (rowid, row[0], *row[5:]))
            db.execute("INSERT INTO fts (rowid, title, phenomenon, cause, body) VALUES (?, ?, ?, ?, ?)",
                       (rowid, *row[1:5]))
    build_s = time.perf_counter() - started

    def run(q: str, filters: dict[str, Any]) -> None:
        where, params = [], []
        for key, column in (("domain", "domain"), ("severity", "severity"), ("cause", "root_cause")):
            if key in filters:
                where.append(f"m.{column} = ?")
                params.append(filters[key])
        if "since" in filters:
            where.append("m.occurred_at >= ?")
            params.append(filters["since"])
        if "until" in filters:
            where.append("m.occurred_at <= ?")
            params.append(filters["until"] + "T23:59:59Z")
        terms = segment(q.replace('"', " ").replace(" OR ", " ").replace(" NOT ", " "), query=True).split()
        if terms:
            match = " ".join('"' + t.replace('"', "") + '"' for t in terms)
            base = "FROM fts JOIN meta m ON m.rowid = fts.rowid WHERE fts MATCH ?"
            args = [match, *params]
            order = "ORDER BY bm25(fts, 3.0, 2.0, 2.0, 1.0)"
        else:
            base, args, order = "FROM meta m WHERE 1", list(params), "ORDER BY m.occurred_at DESC"
        extra = (" AND " + " AND ".join(where)) if where else ""
        db.execute(f"SELECT m.id {base}{extra} {order} LIMIT 20", args).fetchall()
        db.execute(f"SELECT COUNT(*) {base}{extra}", args).fetchone()
        db.execute(f"SELECT m.root_cause, COUNT(*) {base}{extra} GROUP BY m.root_cause", args).fetchall()
        db.execute(f"SELECT m.domain, COUNT(*) {base}{extra} GROUP BY m.domain", args).fetchall()

    for q, filters in QUERIES:
        run(q, filters)
    samples = []
    for _ in range(repeats):
        for q, filters in QUERIES:
            t = time.perf_counter()
            run(q, filters)
            samples.append(time.perf_counter() - t)
    db.close()
    return {"build_s": round(build_s, 1), "db_mb": round(path.stat().st_size / 2**20, 1),
            "search": _percentiles(samples), "queries": len(samples)}


# ---------------------------------------------------------------- main


def _print_breakdown(figures: dict[str, Any]) -> None:
    """The per-kind percentiles and the slowest queries of one backend's run."""
    for kind, kind_figures in figures["by_kind"].items():
        print(f"  {kind:8s} p50 {kind_figures['p50_ms']:7.2f} ms  p95 {kind_figures['p95_ms']:7.2f} ms")
    print("  slowest (median ms): " + "; ".join(f"{q} {ms}" for ms, q in figures["slowest"]))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print (and optionally save) the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.search_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="number of incidents (default 100000)")
    parser.add_argument("--repeats", type=int, default=5, help="times each query of the mix runs (default 5)")
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="indexing processes (default: all cores)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    parser.add_argument("--skip-fts5", action="store_true", help="leave SQLite FTS5 out")
    parser.add_argument("--pg", action="store_true", help="also measure the PostgreSQL incident store (a throwaway "
                        "server on a loopback port unless --pg-url names one)")
    parser.add_argument("--pg-url", help="an empty PostgreSQL database to use for --pg (its incidents are replaced)")
    parser.add_argument("--cold", action="store_true", help="forget the decoded postings of frequent terms "
                        "before every query too (a query's first run after a restart)")
    parser.add_argument("--home", type=Path, help="data directory to use and keep; a store already holding the "
                        "N generated incidents is searched again without importing and reindexing")
    args = parser.parse_args(argv)

    from dsdoctor.kb.catalog import load_catalog
    from dsdoctor.kb.incidents import analyzer

    catalog = load_catalog()
    causes = sorted(catalog)
    workdir = args.home or Path(tempfile.mkdtemp(prefix="dsdoctor-search-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    analyzer.configure(workdir / "home" / "cache")
    analyzer.warm_up()  # load jieba before forking workers
    try:
        started = time.perf_counter()
        records = generate(args.n, catalog)
        lines = [json.dumps(r, ensure_ascii=False) for r in records]
        avg_kb = sum(len(line.encode("utf-8")) for line in lines) / len(lines) / 1024
        print(f"generated {args.n} incidents ({avg_kb:.2f} KB JSON each) in {time.perf_counter() - started:.1f} s",
              flush=True)
        results: dict[str, Any] = {"n": args.n, "avg_record_kb": round(avg_kb, 2), "cores": os.cpu_count(),
                                   "procs": args.procs, "python": sys.version.split()[0],
                                   "load_average_at_start": [round(x, 1) for x in os.getloadavg()]}
        results["whoosh"] = bench_whoosh(workdir / "home", lines, causes, args.repeats, args.procs,
                                         reuse=args.home is not None, cold=args.cold)
        w = results["whoosh"]
        print(f"whoosh: import {w['import_s']} s; full reindex {w['reindex_s']} s wall, {w['reindex_cpu_s']} s CPU "
              f"({w['docs_per_s']} docs/s, "
              f"{w['index_mb']} MB); search p50 {w['search']['p50_ms']} ms, p95 {w['search']['p95_ms']} ms, "
              f"max {w['search']['max_ms']} ms over {w['queries']} queries (median "
              f"{w['matches_per_query']['median']} matches); the same query again p50 "
              f"{w['repeated_query']['p50_ms']} ms, p95 {w['repeated_query']['p95_ms']} ms", flush=True)
        _print_breakdown(w)
        if args.pg or args.pg_url:
            with contextlib.ExitStack() as stack:
                url = _postgres_url(args, stack)
                if url:
                    results["postgresql"] = bench_postgres(url, lines, causes, args.repeats, args.procs)
            if "postgresql" in results:
                g = results["postgresql"]
                print(f"postgresql: load {g['load_s']} s ({g['db_mb']} MB); search p50 {g['search']['p50_ms']} ms, "
                      f"p95 {g['search']['p95_ms']} ms, max {g['search']['max_ms']} ms over {g['queries']} queries; "
                      f"the same query again p50 {g['repeated_query']['p50_ms']} ms, "
                      f"p95 {g['repeated_query']['p95_ms']} ms", flush=True)
                _print_breakdown(g)
                print(f"side by side at {args.n}: search p50 whoosh {w['search']['p50_ms']} ms / postgresql "
                      f"{g['search']['p50_ms']} ms; p95 whoosh {w['search']['p95_ms']} ms / postgresql "
                      f"{g['search']['p95_ms']} ms")
        if not args.skip_fts5:
            for suffix in ("", "-wal", "-shm"):
                (workdir / f"fts5.db{suffix}").unlink(missing_ok=True)
            results["fts5"] = bench_fts5(workdir / "fts5.db", records, args.repeats, args.procs)
            f = results["fts5"]
            print(f"fts5:   build {f['build_s']} s ({f['db_mb']} MB); search p50 {f['search']['p50_ms']} ms, "
                  f"p95 {f['search']['p95_ms']} ms, max {f['search']['max_ms']} ms over {f['queries']} queries")
        goals = {"search_p95_under_50_ms": w["search"]["p95_ms"] < 50}
        if w["reindex_s"]:
            goals["reindex_under_5_min_per_100k"] = w["reindex_s"] < 300 * args.n / 100_000
        results["goals"] = goals
        results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
        print(f"load average at start {results['load_average_at_start']}, at end {results['load_average_at_end']} "
              f"(other work on the machine slows every figure)")
        print("goals (scaled to N): " + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in goals.items()))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    finally:
        if args.keep or args.home:
            print(f"data kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
