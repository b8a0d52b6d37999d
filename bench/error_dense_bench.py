"""Extraction on error-dense logs (thousands of ranks, each printing its teardown), next to GNU grep.

When a big job dies, every rank prints its watchdog block and a traceback: most lines of the log
are error lines. The generator writes N ranks x ``--blocks`` such blocks (11 lines each: four
ProcessGroupNCCL watchdog lines, a six-line traceback, the ``DistBackendError``), interleaved
across ranks as a merged log is, after a short healthy prelude; one origin rank prints a CUDA OOM
traceback seconds before the others time out. Then, in one run per size:

* ``extract`` over the file in a fresh subprocess: MB/s (wall and CPU), peak RSS, whether the origin
  rank is the first error and how many sample lines the watchdog symptom kept for how many ranks;
* ``LC_ALL=C grep -E -c -f`` with the same rule patterns on the same file;

``--repeat`` times each, interleaved, medians printed (a shared machine's load moves both alike).
``--before REV`` also runs the code of git revision REV (its ``dsdoctor``, ``rules``, ``api`` and ``kb``
unpacked into ``bench/out/before-REV`` as one package) in the same interleaving, on the same file, and
prints its figures on a ``before`` line.

Usage: python -m bench.error_dense_bench [--ranks 4096 16384] [--blocks 3] [--repeat 3] [--keep] [--before REV]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from bench import extract_bench
from bench.extract_bench import OUT, run_grep, write_patterns

ORIGIN_OFFSET = 0.37  # the origin rank is this fraction into the rank range (not rank 0)

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from pathlib import Path


def peak_kb():
    # this process's own high-water mark: ru_maxrss also counts the parent's image it was forked from
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


from dsdoctor.rules.extract import extract, warm_up
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import configure_disk_cache
from dsdoctor.rules.settings import load_settings
configure_disk_cache(Path(sys.argv[1]).parent / "hs-cache")  # warm like the CLI: compiled databases on disk
rules = default_rules(); settings = load_settings()
warm_up(rules, settings)
t1 = time.perf_counter()
if len(sys.argv) > 2:  # only fill the cache
    print(json.dumps({})); sys.exit(0)
c1 = time.process_time()
x = extract({}, log_files=[("job", Path(sys.argv[1]))], rules=rules, settings=settings)
t2 = time.perf_counter()
c2 = time.process_time()
wd = x.symptoms.get("s.nccl_watchdog_timeout")
print(json.dumps({"setup_s": t1 - t0, "extract_s": t2 - t1, "cpu_s": c2 - c1, "lines": x.lines_processed,
                  "first_error_rank": x.first_error.rank if x.first_error else None,
                  "first_error_symptom": x.first_error.symptom if x.first_error else None,
                  "scope": x.scope, "symptoms": len(x.symptoms),
                  "watchdog_ranks": len(wd.ranks) if wd else 0, "watchdog_count": wd.count if wd else 0,
                  "watchdog_lines": len(wd.lines) if wd else 0,
                  "kept_lines": sum(len(o.lines) for o in x.symptoms.values()),
                  "maxrss_kb": peak_kb()}))
"""


def _stamp(t: float) -> str:
    """The glog-style ``E1003 18:37:01.832146`` stamp torch's C++ side prints."""
    return "E" + time.strftime("%m%d %H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}"


def victim_block(rank: int, seq: int, t: float) -> list[str]:
    """One rank's teardown: watchdog lines and the traceback of the collective that was aborted."""
    p = f"[rank{rank}]:"
    e = f"{p}[{_stamp(t)} "
    timeout = (f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
               f"NumelIn=16777216, NumelOut=16777216, Timeout(ms)=600000) ran for {600000 + rank % 97} milliseconds "
               "before timing out.")
    return [
        f"{e}ProcessGroupNCCL.cpp:632] [Rank {rank}] {timeout}",
        f"{e}ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: "
        f"{seq}, last completed NCCL work: {seq - 1}.",
        f"{e}ProcessGroupNCCL.cpp:577] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{e}ProcessGroupNCCL.cpp:583] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        f"{p} Traceback (most recent call last):",
        f'{p}   File "/workspace/train.py", line 97, in main',
        f"{p}     loss = engine(batch)",
        f'{p}   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2050, in backward',
        f'{p}   File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2288, in all_reduce',
        f"{p}     work = group.allreduce([tensor], opts)",
        f"{p} torch.distributed.DistBackendError: NCCL communicator was aborted on rank {rank}. Original reason for "
        f"failure was: [Rank {rank}] {timeout}",
    ]


def origin_block(rank: int, t: float) -> list[str]:
    p = f"[rank{rank}]:"
    return [
        f"{p} Traceback (most recent call last):",
        f'{p}   File "/workspace/train.py", line 97, in main',
        f"{p}     loss = engine(batch)",
        f'{p}   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1855, in forward',
        f"{p} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 5 has a total capacity "
        "of 79.15 GiB of which 2.44 GiB is free. Including non-PyTorch memory, this process has 76.70 GiB memory "
        "in use. Of the allocated memory 72.02 GiB is allocated by PyTorch, and 2.11 GiB is reserved by PyTorch "
        "but unallocated.",
        f"{p}[{_stamp(t)} ProcessGroupNCCL.cpp:1595] [PG 0 Rank {rank}] Process group watchdog thread terminated "
        "with exception: CUDA error: out of memory",
    ]


def generate(path: Path, ranks: int, blocks: int, seed: int) -> int:
    """Write the log; return the origin rank."""
    rng = random.Random(seed)
    origin = int(ranks * ORIGIN_OFFSET)
    t = 1727980000.0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for step in range(1, 41):
            fh.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(t + step * 6))},000] [INFO] "
                     f"[logging.py:96:log_dist] [Rank 0] step={step}, skipped=0, lr=[0.000118], mom=[(0.9, 0.95)]\n")
        t += 300
        fh.write("\n".join(origin_block(origin, t)) + "\n")
        t += 600
        order = list(range(ranks))
        for b in range(blocks):
            rng.shuffle(order)  # ranks' output interleaves in the merged log
            buf: list[str] = []
            for rank in order:
                if rank == origin:
                    continue
                buf.extend(victim_block(rank, 4180 + b, t + rng.random() * 2))
                if len(buf) > 20000:
                    fh.write("\n".join(buf) + "\n")
                    buf = []
            if buf:
                fh.write("\n".join(buf) + "\n")
    return origin


def run_extract(path: Path, before: Path | None = None) -> dict:
    """The child's figures for ``path``; with ``before``, on the code unpacked there (see :func:`unpack`)."""
    if before is None:
        return extract_bench.run_extract(path, _CHILD)
    # run from that tree: its dsdoctor package is found before this checkout's (not the editable install's)
    env = dict(os.environ, PYTHONPATH=str(before))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                          cwd=before, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"extract (before) failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def unpack(rev: str) -> Path:
    """The code of git revision ``rev`` as one ``dsdoctor`` package under ``OUT/before-REV`` (the editable
    install maps ``rules``, ``api`` and ``kb`` into the package; here they are copied into it)."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=extract_bench.ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    target = OUT / f"before-{sha}"
    if (target / "dsdoctor" / "rules").is_dir():
        return target
    data = subprocess.run(["git", "archive", sha, "dsdoctor", "rules", "api", "kb"], cwd=extract_bench.ROOT,
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            top, _, rest = member.name.partition("/")
            member.name = f"dsdoctor/{rest}" if top == "dsdoctor" else f"dsdoctor/{member.name}"
            tar.extract(member, target, filter="data")
    return target


def _summary(runs: list[dict], size_mb: float) -> str:
    wall = statistics.median(x["extract_s"] for x in runs)
    cpu = statistics.median(x["cpu_s"] for x in runs)
    rss = max(x["maxrss_kb"] for x in runs)
    return (f"{size_mb:.1f} MiB in {wall:.2f} s = {size_mb / wall:.0f} MiB/s wall, {cpu:.2f} s = {size_mb / cpu:.0f} "
            f"MiB/s CPU (medians of {len(runs)}; +{runs[0]['setup_s']:.2f} s start-up); peak RSS {rss / 1024:.0f} MiB")


def warm_cache() -> None:
    """Compile the rule databases into ``OUT/hs-cache`` once, in a process of its own, so that each
    measured child starts warm (as ``dsdoctor diagnose`` does) and its peak RSS is extraction's, not the
    compiler's."""
    env = dict(os.environ, PYTHONPATH=str(extract_bench.ROOT))
    subprocess.run([sys.executable, "-c", _CHILD, str(OUT / "warm.log"), "--warm"], env=env, cwd=extract_bench.ROOT,
                   check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--blocks", type=int, default=3, help="teardown blocks per rank (default 3)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep an existing generated log of that shape")
    parser.add_argument("--repeat", type=int, default=3, help="runs of extract and of grep per size (medians)")
    parser.add_argument("--before", metavar="REV", help="also run the code of this git revision, interleaved")
    args = parser.parse_args()
    before = unpack(args.before) if args.before else None
    OUT.mkdir(parents=True, exist_ok=True)
    grep = shutil.which("grep")
    patterns = OUT / "patterns.ere"
    n = total = 0
    if grep is not None:
        n, total = write_patterns(patterns, grep)
    warm_cache()
    for ranks in args.ranks:
        log = OUT / f"errordense-{ranks}x{args.blocks}.log"
        origin = int(ranks * ORIGIN_OFFSET)
        if not (args.keep and log.exists()):
            origin = generate(log, ranks, args.blocks, args.seed)
        size_mb = log.stat().st_size / 2**20
        runs, greps, olds = [], [], []
        for _ in range(args.repeat):  # interleaved, so all see the same load
            runs.append(run_extract(log))
            if before is not None:
                olds.append(run_extract(log, before))
            g = run_grep(log, patterns) if grep is not None else None
            if g is not None:
                greps.append(g)
        r = runs[0]
        wall = statistics.median(x["extract_s"] for x in runs)
        found = "found" if r["first_error_rank"] == origin else f"MISSED (first error rank {r['first_error_rank']})"
        print(f"   {ranks:,} ranks x {args.blocks} blocks: {r['lines']:,} lines, {_summary(runs, size_mb)}")
        if olds:
            keys = ("first_error_rank", "first_error_symptom", "scope", "symptoms", "watchdog_ranks", "watchdog_count",
                    "watchdog_lines", "kept_lines", "lines")
            same = "same" if all(olds[0][k] == r[k] for k in keys) else "DIFFERENT"
            print(f"     before ({args.before}): {_summary(olds, size_mb)}; {same} origin, scope and folding")
        print(f"     origin rank {origin} {found} ({r['first_error_symptom']}), scope={r['scope']}; watchdog: "
              f"{r['watchdog_count']:,} lines folded into 1 symptom with {r['watchdog_ranks']:,} ranks, "
              f"{r['watchdog_lines']} sample lines kept ({r['kept_lines']} over {r['symptoms']} symptoms)")
        if grep is None:
            print("     grep: not installed")
            continue
        if greps:
            seconds = statistics.median(g[0] for g in greps)
            print(f"     LC_ALL=C grep -E -c -f ({n} of {total} patterns): {seconds:.2f} s = "
                  f"{size_mb / seconds:.0f} MiB/s (median of {len(greps)}; matching lines: {greps[0][1]}); "
                  f"extract/grep time {seconds / wall:.2f}x")

if __name__ == "__main__":
    main()
