"""Throughput and peak memory of rule extraction on a large multi-rank log, next to GNU grep.

Generates a realistic log of a 64-rank job (8 nodes x 8 GPUs) into bench/out/: pdsh node
prefixes, torchrun ``[rankN]:``/``[defaultN]:`` prefixes, DeepSpeed logger lines, NCCL INFO
init blocks, per-rank step/loss lines, rank-0 DeepSpeed progress, wall-clock timers, Python
warnings, tqdm bars, checkpoint saves, a few fp16 OVERFLOW lines and well under 0.1 % error lines
(one rank OOMs near the end, the others time out). Then, in one run:

* ``extract`` over the file in a fresh subprocess: MB/s end to end (attribution, scope, phase,
  metrics included) and the child's peak RSS (``resource.getrusage(RUSAGE_CHILDREN)``);
* the whole command, ``dsdoctor diagnose FILE --format json`` in a fresh process (start-up,
  extraction, ranking, rendering; compiled-rule and knowledge snapshots warm), its wall time and
  peak RSS;
* ``LC_ALL=C grep -E -c -f patterns.txt`` over the same file with the same rule patterns
  (translated to POSIX ERE where possible; the count of translated patterns is printed), and the
  ratio grep time / command time (1.0x: as fast as grep).

Usage: python -m bench.extract_bench [--size-mb 1024] [--keep] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
RANKS = 64
PER_NODE = 8

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from pathlib import Path
from dsdoctor.rules.extract import extract
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.settings import load_settings
rules = default_rules(); settings = load_settings()
from dsdoctor.rules.extract import warm_up
warm_up(rules, settings)
t1 = time.perf_counter()
x = extract({"environment": {"world_size": 64, "nodes": 8}}, log_files=[("train", Path(sys.argv[1]))],
            rules=rules, settings=settings)
t2 = time.perf_counter()
print(json.dumps({"setup_s": t1 - t0, "extract_s": t2 - t1, "bytes": x.bytes_processed, "lines": x.lines_processed,
                  "symptoms": sorted(x.symptoms), "scope": x.scope, "phase": x.phase,
                  "first_error_rank": x.first_error.rank if x.first_error else None,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _ts(t: float) -> str:
    sec = int(t)
    ms = int((t - sec) * 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec)) + f",{ms:03d}"


class LogWriter:
    """Writes plausible lines of a 64-rank DeepSpeed job until the size is reached."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.t = 1717200000.0
        self.step = 0

    def node(self, rank: int) -> str:
        return f"gpu-node-{rank // PER_NODE:02d}"

    def prefix(self, rank: int) -> str:
        kind = rank % 3
        node = self.node(rank)
        if kind == 0:
            return f"{node}: [rank{rank}]:"
        if kind == 1:
            return f"{node}: [default{rank % PER_NODE}]:"
        return f"{node}: "

    def nccl_init(self) -> list[str]:
        out = []
        for rank in range(RANKS):
            host, pid, dev = self.node(rank), 40000 + rank, rank % PER_NODE
            head = f"{host}:{pid}:{pid + 55} [{dev}] NCCL INFO"
            out.append(f"{host}: {head} Bootstrap : Using ib0:10.1.{rank // PER_NODE}.{dev}<0>")
            out.append(f"{host}: {head} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.0.1<0>")
            out.append(f"{host}: {head} Using network IB")
            for ch in range(16):
                nxt = (rank + 1) % RANKS
                out.append(f"{host}: {head} Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % PER_NODE}] via P2P/IPC/read")
            out.append(f"{host}: {head} comm 0x55d0{rank:04x} rank {rank} nranks {RANKS} cudaDev {dev} nvmlDev {dev} "
                       f"busId {dev + 1}b000 commId 0x1 - Init COMPLETE")
        return out

    def step_block(self) -> list[str]:
        self.step += 1
        self.t += 6.5
        out = []
        r = self.rng
        for rank in range(RANKS):
            pre = self.prefix(rank)
            ts = _ts(self.t + r.random())
            choice = r.random()
            if choice < 0.45:
                out.append(f"{pre}/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:464: UserWarning: "
                           "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.")
            elif choice < 0.75:
                out.append(f"{pre}  {r.randint(1, 99)}%|{'#' * r.randint(1, 30):30s}| {r.randint(1, 999)}/1000 "
                           f"[00:{r.randint(10, 59)}<01:{r.randint(10, 59)}, {r.random() * 3:.2f}it/s]")
            elif choice < 0.93:
                out.append(f"{pre}[{ts}] [INFO] [data_loader.py:88:__iter__] fetched shard "
                           f"{r.randint(0, 99999):05d} ({r.randint(100, 999)} samples, {r.random() * 40:.1f} MB)")
            else:
                loss = 2.5 - self.step * 1e-5 + r.random() * 0.05
                out.append(f"{pre}[{ts}] [INFO] [train.py:412:train_step] step {self.step} | loss={loss:.4f}, "
                           f"grad_norm={0.8 + r.random() * 0.4:.3f} | loss_scale=8192.0 | lr=1.18e-04")
        ts = _ts(self.t)
        if self.step % 10 == 0:
            out.append(f"gpu-node-00: [{ts}] [INFO] [logging.py:96:log_dist] [Rank 0] step={self.step}, skipped=3, "
                       "lr=[0.000118], mom=[(0.9, 0.95)]")
            out.append(f"gpu-node-00: [{ts}] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd: 410.12 | "
                       "bwd: 1230.55 | bwd_inner: 1100.02 | bwd_allreduce: 130.41 | step: 95.13")
        if self.step % 500 == 0:
            out.append(f"gpu-node-00: [{ts}] [INFO] [torch_checkpoint_engine.py:21:save] [Torch] Checkpoint "
                       f"global_step{self.step} is about to be saved!")
            out.append(f"gpu-node-00: [{ts}] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint "
                       f"global_step{self.step} is ready now!")
        return out

    def warmup(self) -> list[str]:
        out = [f"gpu-node-00: [{_ts(self.t)}] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2, "
               "git-hash=unknown, git-branch=unknown"]
        scale = 2 ** 16
        for _ in range(4):
            out.append(f"gpu-node-00: [{_ts(self.t)}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! "
                       f"Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}")
            scale //= 2
        return out

    def failure(self) -> list[str]:
        ts = _ts(self.t + 3)
        out = [
            "gpu-node-03: [rank27]: Traceback (most recent call last):",
            'gpu-node-03: [rank27]:   File "/workspace/train.py", line 97, in main',
            '    loss = engine(batch["input_ids"], labels=batch["labels"]).loss',
            'gpu-node-03: [rank27]:   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1855, in forward',
            "gpu-node-03: [rank27]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 3 has a "
            "total capacity of 79.15 GiB of which 2.44 GiB is free. Including non-PyTorch memory, this process has "
            "76.70 GiB memory in use. Of the allocated memory 72.02 GiB is allocated by PyTorch, and 2.11 GiB is "
            "reserved by PyTorch but unallocated.",
        ]
        for rank in range(RANKS):
            if rank != 27:
                out.append(f"{self.node(rank)}: [rank{rank}]:[E{time.strftime('%m%d', time.gmtime(self.t))} "
                           f"{ts[11:19]}.{rank:06d} ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective "
                           "operation timeout: WorkNCCL(SeqNum=99, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                           "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")
        return out


def generate(path: Path, size_mb: int, seed: int) -> None:
    """Write the benchmark log (about ``size_mb`` MiB)."""
    target = size_mb * 1024 * 1024
    w = LogWriter(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(path, "w", encoding="utf-8") as fh:
        for block in (w.nccl_init(), w.warmup()):
            text = "\n".join(block) + "\n"
            fh.write(text)
            written += len(text)
        tail = w.failure()
        tail_len = sum(len(line) + 1 for line in tail)
        while written < target - tail_len:
            buf = []
            for _ in range(50):
                buf.extend(w.step_block())
            text = "\n".join(buf) + "\n"
            fh.write(text)
            written += len(text)
        fh.write("\n".join(tail) + "\n")


_ERE_ESCAPES = {r"\d": "[0-9]", r"\D": "[^0-9]", r"\s": "[[:space:]]", r"\S": "[^[:space:]]"}


def to_ere(pattern: str) -> str | None:
    """Best-effort translation of an RE2 pattern to a GNU ``grep -E`` pattern (None if not possible)."""
    if re.search(r"\(\?[=!<]|\\[pPQEAzZ]|\*\?|\+\?|\?\?|\}\?|\(\?[a-z]+\)", pattern.replace("(?P<", "(")):
        return None
    out = re.sub(r"\(\?P<\w+>", "(", pattern)
    out = out.replace("(?:", "(")
    for k, v in _ERE_ESCAPES.items():
        out = out.replace(k, v)
    if "(?" in out:
        return None
    return out


def _grep_accepts(grep: str, pattern: str) -> bool:
    """grep compiles the pattern and it does not match an empty or unrelated line (that would count every line)."""
    proc = subprocess.run([grep, "-E", "-c", "-e", pattern], input=b"\nzzzz 1234\n", capture_output=True,
                          env=dict(os.environ, LC_ALL="C"), check=False)
    return proc.returncode == 1 and not proc.stderr


def write_patterns(path: Path, grep: str) -> tuple[int, int]:
    """The rule patterns that translate to POSIX ERE and that grep accepts, one per line."""
    from dsdoctor.rules.loader import default_rules

    rules = default_rules().line_rules
    translated = [p for p in (to_ere(r.pattern) for r in rules) if p and _grep_accepts(grep, p)]
    path.write_text("\n".join(translated) + "\n", encoding="utf-8")
    return len(translated), len(rules)


def run_extract(path: Path, child: str = _CHILD) -> dict:
    """Run ``child`` (Python source reading the log at argv[1]) in a fresh process; its JSON result."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"extract failed: {proc.stderr.strip()[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    result["children_maxrss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return result


_COMMAND = """
import resource, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
wall = time.perf_counter() - t
print(proc.returncode, wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, proc.stderr[-500:].replace(chr(10), " "))
"""


def run_command(path: Path, home: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of ``dsdoctor diagnose`` on ``path`` (the second of two runs: the
    first warms the caches in ``home``), measured by a small parent so that only the command is counted."""
    cli = Path(sys.executable).with_name("dsdoctor")
    argv = [str(cli), "diagnose", str(path), "--format", "json"] if cli.exists() else \
        [sys.executable, "-m", "dsdoctor.api.cli", "diagnose", str(path), "--format", "json"]
    env = dict(os.environ, DSDOCTOR_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode; measure that
    result = (0, 0.0, 0, "")
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _COMMAND, *argv], capture_output=True, text=True, env=env,
                              cwd=ROOT, check=False)
        rc, wall, rss, err = proc.stdout.split(" ", 3)
        if rc != "0":
            raise RuntimeError(f"dsdoctor diagnose failed ({rc}): {err.strip()}")
        result = (int(rc), float(wall), int(rss), err)
    return result[1], result[2]


def run_grep(path: Path, patterns: Path) -> tuple[float, str] | None:
    grep = shutil.which("grep")
    if grep is None:
        return None
    env = dict(os.environ, LC_ALL="C")
    start = time.perf_counter()
    proc = subprocess.run([grep, "-E", "-c", "-f", str(patterns), str(path)], capture_output=True, text=True, env=env,
                          check=False)
    return time.perf_counter() - start, (proc.stdout.strip() or proc.stderr.strip()[:200])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="log size in MiB (default 1024)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep an existing generated log of that size")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"multirank-{args.size_mb}mb.log"
    if not (args.keep and log.exists()):
        t = time.perf_counter()
        generate(log, args.size_mb, args.seed)
        print(f"   generated {log.relative_to(ROOT)} ({log.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    size_mb = log.stat().st_size / 2**20
    r = run_extract(log)
    mbps = size_mb / r["extract_s"]
    print(f"   extract: {r['lines']:,} lines, {size_mb:.0f} MiB in {r['extract_s']:.2f} s = {mbps:.0f} MiB/s "
          f"(+{r['setup_s']:.2f} s start-up: imports, rule load, Hyperscan compile); "
          f"peak RSS {r['children_maxrss_kb'] / 1024:.0f} MiB")
    print(f"   result: scope={r['scope']} phase={r['phase']} first_error_rank={r['first_error_rank']} "
          f"symptoms={', '.join(r['symptoms'])}")
    grep = shutil.which("grep")
    if grep is None:
        print("   grep: not installed")
        return
    command, command_rss = run_command(log, OUT / "home")
    print(f"   dsdoctor diagnose {log.name} --format json: {command:.2f} s wall (start-up, extraction, ranking, "
          f"output; warm caches) = {size_mb / command:.0f} MiB/s; peak RSS {command_rss / 1024:.0f} MiB")
    patterns = OUT / "patterns.ere"
    n, total = write_patterns(patterns, grep)
    g = run_grep(log, patterns)
    if g is not None:
        seconds, count = g
        print(f"   LC_ALL=C grep -E -c -f ({n} of {total} patterns translated to ERE): {seconds:.2f} s = "
              f"{size_mb / seconds:.0f} MiB/s (matching lines: {count}); grep time / dsdoctor diagnose time "
              f"{seconds / command:.2f}x")


if __name__ == "__main__":
    main()
