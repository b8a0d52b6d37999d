"""Facts a report names whenever they matter: named nowhere in its words, they are probably not so.

A bf16 failure is told with bf16 in it (the flag, the dtype, the error). When a description was
written and none of the report's stated texts (description, pasted logs, environment values) names
the fact, its symptom gets a soft "no" (rules/data/unnamed.yaml). A config or a rule that decided
the symptom wins; logs read from files alone (no description) say nothing here, since the words of a
report are what this reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsdoctor.rules import datafile
from dsdoctor.rules.collect import Collector
from dsdoctor.rules.model import Extraction

DATA = Path(__file__).resolve().parent / "data" / "unnamed.yaml"
#: characters of each text searched (a bf16 flag or message is not buried deep in a pasted block)
MAX_CHARS = 65536


def facts() -> list[dict[str, Any]]:
    """The shipped facts (symptom, words, reliability, examples)."""
    return list(datafile.load(DATA)["facts"])


def names(fact: dict[str, Any], text: str) -> bool:
    """Whether ``text`` names the fact."""
    return datafile.caseless(fact["words"]).search(text[:MAX_CHARS]) is not None


def check(description: Any, texts: list[str], collector: Collector, extraction: Extraction) -> None:
    """A soft "no" for every fact that the stated ``texts`` never name, when a description was given."""
    if not isinstance(description, str) or not description.strip() or "config" in extraction.supplied_sources:
        return  # no words to read, or a config whose own check speaks for its facts
    for fact in facts():
        sid = fact["symptom"]
        if sid in collector.symptoms or sid in collector.decided or sid in extraction.absent:
            continue
        if not any(names(fact, text) for text in texts):
            extraction.absent.add(sid)
            extraction.absent_strength[sid] = float(fact["reliability"])
