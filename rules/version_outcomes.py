"""Two releases compared in a report's words, read as the outcome of x.other_release.

"It throws with DeepSpeed 0.6.1; the same code runs with 0.5.8" is an experiment the reporter has
already run: the older release works. A phrase rule cannot compare numbers, so this small reader
finds each release named in a clause with the words that say it worked or failed, and compares the
working release with the failing one of the same package (data: rules/data/version_outcomes.yaml).
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any, NamedTuple

from dsdoctor.rules import datafile
from dsdoctor.rules.units import release_key

DATA = Path(__file__).resolve().parent / "data" / "version_outcomes.yaml"


class Said(NamedTuple):
    outcome: str  # older_works | newer_works
    lineno: int
    text: str


def _alt(terms: list[str], bounded: bool = True) -> str:
    parts = [rf"\b(?:{t})\b" if bounded and t[:1].isascii() else f"(?:{t})" for t in terms]
    return "|".join(parts)


@functools.lru_cache(maxsize=1)
def _patterns() -> dict[str, Any]:
    d = datafile.load(DATA)
    packages = "|".join(d["packages"])
    release = rf"(?:\b(?P<pkg>{packages}){d['joiner']}|\bv)?{d['version']}"
    return {
        "release": datafile.caseless(release),
        "package": datafile.caseless(rf"\b(?:{packages})\b"),
        "works": datafile.caseless(_alt(d["works"])),
        "fails": datafile.caseless(_alt(d["fails"])),
        "negation": datafile.caseless("(?:" + "|".join(d["negations"]) + r")\W{0,3}\S{0,12}\s*$"),
        "upgrade": datafile.caseless(rf"(?:{'|'.join(d['upgrade'])})\s*$"),
        "upgrade_to": datafile.caseless(rf"^\s*(?:{'|'.join(d['upgrade_to'])})\s*$"),
        "breaks": datafile.caseless(d["clause_breaks"]),
        "reliability": float(d["reliability"]),
    }


def _polarity(p: dict[str, Any], clause: str) -> str | None:
    """'ok', 'bad' or None (both or neither) for one clause."""
    ok = bad = False
    for m in p["works"].finditer(clause):
        if p["negation"].search(clause[max(0, m.start() - 16):m.start()]):
            bad = True
        else:
            ok = True
    bad = bad or p["fails"].search(clause) is not None
    return None if ok == bad else ("ok" if ok else "bad")


def read(text: str) -> list[Said]:
    """Every comparison of a working and a failing release of one package in ``text``."""
    p = _patterns()
    out: list[Said] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        found = _line(p, line)
        if found:
            out.append(Said(found, lineno, line.strip()[:500]))
    return out


def _line(p: dict[str, Any], line: str) -> str | None:
    ok: dict[str, set[tuple[int, ...]]] = {}
    bad: dict[str, set[tuple[int, ...]]] = {}
    releases = []
    named = [(m.start(), m.group(0).lower()) for m in p["package"].finditer(line)]
    for m in p["release"].finditer(line):
        after = line[m.end():m.end() + 2]
        if after[:1] in ("%", "x", "X", "e") or after[:1].isdigit() or (after[:1] == "." and after[1:2].isdigit()):
            continue  # 1.5x, 55.5%, 2.5e-5: not a release
        before = [name for at, name in named if at < m.start()]
        pkg = (m.group("pkg") or "").lower() or (before[-1] if before else None)
        if pkg is None:
            continue
        releases.append((m.start(), m.end(), pkg, release_key(m.group("v"))))
    if len(releases) < 2:
        return None
    # "from A to B" after an upgrade verb: A worked, B is the one that broke
    for (s1, e1, k1, v1), (s2, _, k2, v2) in itertools.pairwise(releases):
        if k1 == k2 and v1 != v2 and p["upgrade"].search(line[max(0, s1 - 60):s1]) \
                and p["upgrade_to"].search(line[e1:s2]):
            ok.setdefault(k1, set()).add(v1)
            bad.setdefault(k1, set()).add(v2)
    if not ok:
        bounds = [0] + [m.end() for m in p["breaks"].finditer(line)] + [len(line)]
        for start, end, pkg, version in releases:
            lo = max(b for b in bounds if b <= start)
            hi = min(b for b in bounds if b >= end)
            said = _polarity(p, line[lo:hi])
            if said:
                (ok if said == "ok" else bad).setdefault(pkg, set()).add(version)
    for pkg, good in ok.items():
        broken = bad.get(pkg, set())
        if good and broken and not good & broken:
            if max(good) < min(broken):
                return "older_works"
            if min(good) > max(broken):
                return "newer_works"
    return None


def examples() -> tuple[list[tuple[str, str]], list[str]]:
    """The file's own (sentence, outcome) and no-match examples, for `dsdoctor rules test` and tests."""
    d = datafile.load(DATA)["examples"]
    return [(s, o) for s, o in d["match"]], list(d["no_match"])


def reliability() -> float:
    return _patterns()["reliability"]
