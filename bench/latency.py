"""Latency of inference + experiment selection on the whole knowledge base, and of the CLI end to end.

Prints p50/p95 of rank()+propose() over the evidence of every seed case and devset case (many
repetitions), next to the time of the rules extraction of the same evidence; then the wall time
of `dsdoctor diagnose` on a generated 1 KB and 1 MB multi-rank log (caches warm, bytecode
written) next to `dsdoctor --help` (interpreter and import start-up) in the same run.

Usage: python -m bench.latency [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the engine's memos (kb/inference.py, kb/planner.py), cleared for the cold figure
MEMOS = ("likelihood_memo", "ranking_memo", "proposal_memo")


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    from bench.accuracy import devset_cases, seed_cases
    from bench.api_bench import multi_rank_log
    from dsdoctor.kb.inference import EvidenceState, rank
    from dsdoctor.kb.loader import get_kb
    from dsdoctor.kb.planner import propose
    from dsdoctor.rules.extract import extract

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    kb = get_kb()
    infer_ms, warm_ms, extract_ms = [], [], []
    for _, evidence, log_files, _ in seed_cases() + devset_cases():
        t0 = time.perf_counter()
        extraction = extract(evidence, log_files=log_files)
        extract_ms.append(1000 * (time.perf_counter() - t0))
        state = EvidenceState.from_extraction(extraction)
        for _ in range(args.repeat):
            for memo in MEMOS:  # cold: nothing remembered from earlier evidence
                kb.cache.pop(memo, None)
            t0 = time.perf_counter()
            ranking = rank(kb, state)
            propose(kb, ranking.posterior)
            infer_ms.append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()  # the same evidence again: a failure that repeats
            ranking = rank(kb, state)
            propose(kb, ranking.posterior)
            warm_ms.append(1000 * (time.perf_counter() - t0))
    print(f"   {'step':<40} {'p50 ms':>8} {'p95 ms':>8} {'n':>6}")
    for name, values in (("rank + propose (whole KB), cold", infer_ms),
                         ("rank + propose, evidence seen before", warm_ms),
                         ("rules extraction (reference)", extract_ms)):
        print(f"   {name:<40} {statistics.median(values):>8.2f} {_pct(values, .95):>8.2f} {len(values):>6}")

    exe = str(Path(sys.executable).with_name("dsdoctor"))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        log.write_text(multi_rank_log(1 << 20), encoding="utf-8")
        small = Path(tmp) / "small.log"
        small.write_text(multi_rank_log(1024), encoding="utf-8")
        runs = {"dsdoctor --help (start-up)": [exe, "--help"], "dsdoctor diagnose 1 KB log": [exe, "diagnose", str(small)],
                "dsdoctor diagnose 1 MB log": [exe, "diagnose", str(log)]}
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode; measure that
        subprocess.run([exe, "diagnose", str(small)], capture_output=True, check=True, cwd=tmp, env=env)  # warm caches
        for name, cmd in runs.items():
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                subprocess.run(cmd, capture_output=True, check=True, cwd=tmp, env=env)
                times.append(1000 * (time.perf_counter() - t0))
            print(f"   {name:<34} {statistics.median(times):>8.0f} {'':>8} {len(times):>6}")


if __name__ == "__main__":
    main()
