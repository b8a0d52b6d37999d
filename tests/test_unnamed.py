"""Facts a report names whenever they matter (rules/unnamed.py): named nowhere, a soft "no". Its
sentences are our own, never a corpus case's."""

from __future__ import annotations

import pytest

from dsdoctor.kb.diagnosis import diagnose
from dsdoctor.rules import unnamed
from dsdoctor.rules.extract import extract

FACTS = unnamed.facts()
EXAMPLES = [(f["symptom"], kind, text) for f in FACTS for kind in ("named", "unnamed")
            for text in f["examples"][kind]]


def test_every_fact_has_examples_both_ways() -> None:
    for fact in FACTS:
        assert fact["examples"]["named"] and fact["examples"]["unnamed"], fact["symptom"]
        assert 0 < fact["reliability"] < 1


@pytest.mark.parametrize(("sid", "kind", "text"), EXAMPLES)
def test_examples(sid: str, kind: str, text: str) -> None:
    ex = extract({"description": text})
    if kind == "unnamed":
        assert sid in ex.absent and ex.absent_strength[sid] < 1.0, text
    else:
        assert sid not in ex.absent, text


def test_no_description_no_verdict() -> None:
    """Logs alone are not a report's words: nothing is inferred from what they leave out."""
    ex = extract({"logs": [{"source": "rank0", "text": "RuntimeError: CUDA error: out of memory\n"}]})
    assert "s.bf16_enabled" not in ex.absent


def test_a_config_decides_instead() -> None:
    ex = extract({"description": "loss goes to nan after a while", "config": {"bf16": {"enabled": True}}})
    assert "s.bf16_enabled" not in ex.absent
    assert "s.bf16_enabled" in ex.symptoms


def test_a_pre_ampere_gpu_alone_does_not_make_bf16_the_answer() -> None:
    """A Turing card with a failure that never mentions bf16 is not a bf16 failure; named, it is."""
    env = {"gpu": "GeForce RTX 2080 Ti"}
    plain = diagnose({"description": "the multi-GPU test program fails right away with an initialization "
                                     "error on this machine", "environment": env}, top=3)
    assert plain["causes"][0]["id"] != "compute.bf16_unsupported"
    named = diagnose({"description": "with --bf16 the multi-GPU test program fails right away on this machine",
                      "environment": env}, top=3)
    assert named["causes"][0]["id"] == "compute.bf16_unsupported"
