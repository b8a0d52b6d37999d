"""Accuracy on the probe set: short chat-style reports written from domain knowledge, not from threads.

``bench/probes/probes.json`` holds three reports per catalog cause (English and Chinese), written by a
helper session that read neither the corpus nor any issue thread: how each failure presents, never
its cause by name. Unlike the corpus they are not real reports, so they measure coverage of the words
people use rather than accuracy to expect; a miss here is a gap in the lexicon or the knowledge.

Usage: python -m bench.probes [--verbose]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PROBES = Path(__file__).resolve().parent / "probes" / "probes.json"


def load_probes(path: Path = PROBES) -> list[dict[str, str]]:
    return json.loads(path.read_text(encoding="utf-8"))


def rank_of_label(kb, probe: dict[str, str]) -> int:
    """1-based rank of the probe's label among the catalog causes (0: not ranked)."""
    from bench.corpus import _catalog_probabilities
    from dsdoctor.kb.diagnosis import diagnose

    diagnosis = diagnose({"description": probe["text"]}, kb=kb, top=10, lang=probe["language"])
    ranked = [cause for cause, _ in _catalog_probabilities(kb, diagnosis)]
    return ranked.index(probe["label"]) + 1 if probe["label"] in ranked else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", action="store_true", help="print every probe outside the top three")
    args = parser.parse_args()
    from dsdoctor.kb.loader import get_kb

    kb = get_kb()
    probes = load_probes()
    ranks = [(probe, rank_of_label(kb, probe)) for probe in probes]
    print("== bench.probes (reports written from domain knowledge; coverage, not expected accuracy)")
    for name, rows in (("all", ranks), *((lang, [r for r in ranks if r[0]["language"] == lang]) for lang in ("en", "zh"))):
        if rows:
            top1 = sum(rank == 1 for _, rank in rows) / len(rows)
            top3 = sum(0 < rank <= 3 for _, rank in rows) / len(rows)
            print(f"   {name:<4} n {len(rows):>3}  top-1 {100 * top1:5.1f}%  top-3 {100 * top3:5.1f}%")
    if args.verbose:
        for probe, rank in ranks:
            if not 0 < rank <= 3:
                print(f"   miss {probe['id']} ({probe['label']}, rank {rank or '-'}): {probe['text']}")


if __name__ == "__main__":
    main()
