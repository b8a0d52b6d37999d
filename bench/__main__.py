"""`python -m bench` (what `make bench` runs): every benchmark in turn, quick sizes by default.

Pass --full for the sizes the issues name (1 GB log, 100,000 incidents); it takes a while.
"""

from __future__ import annotations

import importlib
import sys
import time

#: (module, arguments for the quick run, arguments for --full)
BENCHES: list[tuple[str, list[str], list[str]]] = [
    ("bench.kb_load", [], []),
    ("bench.accuracy", [], []),
    ("bench.corpus", [], []),
    ("bench.probes", [], []),
    ("bench.simulation", [], []),
    ("bench.latency", [], []),
    ("bench.extract_bench", ["--size-mb", "200"], []),
    ("bench.error_dense_bench", ["--ranks", "4096"], ["--ranks", "4096", "16384"]),
    ("bench.search_bench", ["--n", "5000"], ["--n", "100000"]),
    ("bench.api_bench", ["--seconds", "5"], []),
    ("bench.fleet_bench", ["--seconds", "5"], []),
]


def main() -> int:
    full = "--full" in sys.argv[1:]
    failures = 0
    for name, quick, big in BENCHES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                print(f"== {name}: not present, skipped")
                continue
            raise
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        sys.argv = [name, *(big if full else quick)]
        try:
            module.main()
        except SystemExit as exc:
            failures += bool(exc.code)
        except Exception as exc:  # keep going: one broken bench must not hide the others
            failures += 1
            print(f"   FAILED: {type(exc).__name__}: {exc}")
        print(f"   ({time.perf_counter() - start:.1f} s)\n", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
