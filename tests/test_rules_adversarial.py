"""Bad input never crashes and costs about as much per MB as a normal log (a ratio, not an absolute time).

Inputs: random binary data, invalid UTF-8, one multi-megabyte line full of trigger words, regex-bait lines
(near misses for backtracking engines and lines that hit several rules), an empty file and files of the
wrong type. The normal reference is the benchmark's realistic multi-rank log at a small size.
"""

from __future__ import annotations

import functools
import gzip
import random
import time
from pathlib import Path

import pytest

from bench.extract_bench import generate
from dsdoctor.rules.extract import extract, warm_up
from dsdoctor.rules.loader import load_rules_with_problems

MB = 2**20
MAX_RATIO = 8.0  # adversarial seconds per MB / normal seconds per MB


@functools.cache
def rules():
    ruleset = load_rules_with_problems()[0]
    warm_up(ruleset)
    return ruleset


def _bait() -> bytes:
    lines = [
        b"CUDA out of memory. Tried to allocate " + b"9" * 300,
        b"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" + b"1" * 400,
        b"(" * 500 + b"a" * 500 + b"!",
        b"[rank" + b"1" * 300 + b"]:[E" + b"9" * 200,
        b"loss=" + b"9." * 200 + b" grad_norm=nan" * 20,
        b"a" * 2000 + b"X",
        b"File \"" + b"/x" * 300 + b"\", line " + b"1" * 100,
        b"NCCL WARN " * 200,
        b"[2024-05-01 10:00:00,000] " * 40,
    ]
    return (b"\n".join(lines) + b"\n") * 600


INPUTS = {
    "binary": lambda: random.Random(1).randbytes(2 * MB),
    "invalid_utf8": lambda: b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xe2\x82\x28\xf0\x28\x8c\xbc abc\n" * 100_000,
    "one_long_line": lambda: (b"Watchdog caught collective operation timeout nan OVERFLOW! CUDA out of memory " * 30_000) + b"\n",
    "regex_bait": _bait,
}


def _seconds_per_mb(path: Path, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        extract({}, log_files=[(path.stem, path)], rules=rules())
        best = min(best, time.perf_counter() - start)
    return best / max(path.stat().st_size / MB, 1e-9)


@functools.cache
def normal_seconds_per_mb(tmp: str) -> float:
    path = Path(tmp) / "normal.log"
    generate(path, 3, seed=11)
    return _seconds_per_mb(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_bad_input_costs_about_the_same_per_mb(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.getbasetemp()
    normal = normal_seconds_per_mb(str(tmp))
    path = tmp_path_factory.mktemp("adv") / f"{name}.log"
    path.write_bytes(INPUTS[name]())
    ratio = _seconds_per_mb(path) / normal
    assert ratio < MAX_RATIO, f"{name}: {ratio:.1f}x the time per MB of a normal log"


def test_empty_and_wrong_types_are_handled(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + random.Random(2).randbytes(50_000))
    broken_gz = tmp_path / "cut.log.gz"
    noise = random.Random(3).randbytes(200_000).hex().encode()
    broken_gz.write_bytes(gzip.compress(noise)[:100_000])
    x = extract({}, log_files=[("e", empty), ("p", png), ("g", broken_gz)], rules=rules())
    assert any("PNG image" in w for w in x.warnings)
    assert any("cut.log.gz" in w for w in x.warnings)  # a truncated gzip stops with a warning, not a traceback


def test_bait_lines_still_find_real_symptoms(tmp_path: Path) -> None:
    path = tmp_path / "bait.log"
    oom = (b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
           b"79.15 GiB of which 1.02 GiB is free.\n")
    path.write_bytes(_bait()[: MB // 2] + oom)
    x = extract({}, log_files=[("b", path)], rules=rules())
    assert "s.cuda_oom" in x.symptoms
