"""Top-1 / top-3 accuracy of the whole pipeline on the seed cases and the devset, side by side.

Usage: python -m bench.accuracy [--verbose] [--devset DIR]
The devset lives beside the repository (../shared/devset/cases); it is skipped when absent.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED_DIR = ROOT / "seed_cases"
DEVSET_DIR = ROOT.parent / "shared" / "devset" / "cases"


def seed_cases() -> list[tuple[str, dict, list, set[str]]]:
    """(name, evidence, log files, acceptable causes) for every seed case folder."""
    from dsdoctor.api.evidence_files import load_case_dir

    out = []
    for folder in sorted(p for p in SEED_DIR.iterdir() if p.is_dir()):
        evidence, log_files, expected = load_case_dir(folder)
        ok = {expected["root_cause"], *expected.get("also_ok", [])}
        out.append((folder.name, evidence, log_files, ok))
    return out


def devset_cases(folder: Path = DEVSET_DIR) -> list[tuple[str, dict, list, set[str]]]:
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        case = json.loads(path.read_text(encoding="utf-8"))
        out.append((case["id"], case["evidence"], [], {case["label"], *case.get("also_ok", [])}))
    return out


def score(cases, kb, verbose: bool = False) -> dict[str, float]:
    from dsdoctor.kb.diagnosis import diagnose, ranked_catalog_causes

    top1 = top3 = 0
    started = time.perf_counter()
    for name, evidence, log_files, ok in cases:
        result = diagnose(evidence, kb=kb, log_files=log_files, top=10)
        ranked = ranked_catalog_causes(kb, result)
        hit1 = bool(ranked[:1]) and ranked[0] in ok
        hit3 = bool(ok & set(ranked[:3]))
        top1 += hit1
        top3 += hit3
        if verbose and not hit1:
            got = ", ".join(f"{c['id']} {c['probability']:.2f}" for c in result["causes"][:3])
            print(f"   {'MISS3' if not hit3 else 'miss1'} {name}: want {sorted(ok)}; got {got}; "
                  f"unexplained {result['unexplained']:.2f}; symptoms {[s['id'] for s in result['symptoms']]}")
    n = max(1, len(cases))
    return {"cases": len(cases), "top1": top1 / n, "top3": top3 / n,
            "ms_per_case": 1000 * (time.perf_counter() - started) / n}


def main() -> None:
    from dsdoctor.kb.loader import get_kb

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="print every miss with what the engine saw")
    parser.add_argument("--devset", type=Path, default=DEVSET_DIR)
    args = parser.parse_args()
    kb = get_kb()
    rows = [("seed cases", score(seed_cases(), kb, args.verbose)),
            ("devset", score(devset_cases(args.devset), kb, args.verbose))]
    print(f"   {'set':<12} {'cases':>5} {'top-1':>7} {'top-3':>7} {'ms/case':>8}")
    for name, r in rows:
        print(f"   {name:<12} {r['cases']:>5} {r['top1']:>7.1%} {r['top3']:>7.1%} {r['ms_per_case']:>8.1f}")


if __name__ == "__main__":
    main()
