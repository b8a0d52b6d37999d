"""Load time of the whole knowledge base, next to plain YAML parsing of the same files.

Prints medians for: a fresh interpreter (imports + load, via subprocess), warm in-process loads
with the parse cache cleared and with it hot, and the reference runs in the same process:
``yaml.safe_load`` (pure Python) and ``yaml.load(Loader=CSafeLoader)`` of the same files.
While the knowledge base still has errors the timed call is ``kb.loader.collect`` (the work
``load_kb`` does before it raises), and the output says so.

Usage: python -m bench.kb_load [--repeat 10] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_FRESH = """
import sys, time
t = time.perf_counter()
from pathlib import Path
from dsdoctor.kb.loader import collect, layers_for
loaded = collect(layers_for([], data_dir=Path({data_dir!r})))
print(time.perf_counter() - t)
"""
_FRESH_REFERENCE = """
import time
t = time.perf_counter()
import yaml
from pathlib import Path
for p in {files!r}:
    yaml.load(Path(p).read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
print(time.perf_counter() - t)
"""


def _median_seconds(func: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _fresh(code: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main() -> None:
    """Print the load-time table (``python -m bench.kb_load``)."""
    parser = argparse.ArgumentParser(prog="python -m bench.kb_load", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs per measurement (median reported)")
    parser.add_argument("--data-dir", type=Path, default=None, help="base knowledge directory (default kb/data)")
    args = parser.parse_args(sys.argv[1:])

    import yaml

    from dsdoctor.kb.loader import DATA_DIR, clear_cache, collect, knowledge_files, layers_for

    data_dir = args.data_dir or DATA_DIR
    layers = layers_for([], data_dir=data_dir)
    files = [p for layer in layers for p in knowledge_files(layer.path)]
    lines = sum(p.read_text(encoding="utf-8").count("\n") for p in files)
    texts = [p.read_text(encoding="utf-8") for p in files]

    clear_cache()
    loaded = collect(layers)
    kb = loaded.kb
    errors = sum(p.severity == "error" for p in loaded.problems)
    print(f"knowledge base: {len(files)} files, {lines} lines; {len(kb.causes)} causes, {len(kb.mechanisms)} "
          f"mechanisms, {len(kb.symptoms)} symptoms, {len(kb.experiments)} experiments")
    if errors:
        print(f"note: it has {errors} error(s) now (dsdoctor kb lint); timing collect(), the work load_kb does "
              "before it raises")

    def cold() -> None:
        clear_cache()
        collect(layers)

    fresh_kb = _fresh(_FRESH.format(data_dir=str(data_dir)), max(3, args.repeat // 2))
    fresh_ref = _fresh(_FRESH_REFERENCE.format(files=[str(p) for p in files]), max(3, args.repeat // 2))
    rows = [
        ("fresh process: imports + load", fresh_kb),
        ("fresh process: import yaml + CSafeLoader (reference)", fresh_ref),
        ("in process: load, parse cache cleared", _median_seconds(cold, args.repeat)),
        ("in process: load, parse cache hot (get_kb(reload=True))", _median_seconds(lambda: collect(layers), args.repeat)),
        ("in process: yaml.safe_load, pure Python (reference)",
         _median_seconds(lambda: [yaml.safe_load(t) for t in texts], args.repeat)),
        ("in process: yaml.load CSafeLoader (reference)",
         _median_seconds(lambda: [yaml.load(t, Loader=yaml.CSafeLoader) for t in texts], args.repeat)),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}}  median")
    for name, seconds in rows:
        print(f"{name:{width}}  {seconds * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
