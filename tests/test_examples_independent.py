"""Examples are written independently of the corpus (issue 13, point C): no sentence-sized example of a
phrase rule, a lexicon composition, the version-outcome reader, an unnamed fact, or a test module that says its
sentences are its own is contained verbatim in any corpus case's description or logs.

Machine messages and identifiers are real text by nature ("torch.cuda.OutOfMemoryError", "Extra inputs
are not permitted"), so only sentence-sized strings are checked: six words and 30 characters or more,
or 12 Chinese characters or more.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.corpus import evidence_texts
from dsdoctor.rules import unnamed, version_outcomes
from dsdoctor.rules.lexicon import load_lexicon
from dsdoctor.rules.loader import default_rules

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
#: a test module whose docstring says this holds its sentences to the check
CLAIM = "corpus case"


def _sentence_sized(text: str) -> bool:
    return (len(text) >= 30 and len(text.split()) >= 6) or sum("\u4e00" <= ch <= "\u9fff" for ch in text) >= 12


@pytest.fixture(scope="module")
def corpus_texts() -> list[str]:
    texts = evidence_texts()
    assert len(texts) > 500  # the corpus is there: an empty list would let every example pass
    return texts


def _copied(examples: list[str], texts: list[str]) -> list[str]:
    return [e for e in examples if _sentence_sized(e) and any(e.lower() in t for t in texts)]


def _rule_examples() -> list[str]:
    out = []
    for rule in default_rules().phrase_rules:
        out += [e["line"] if isinstance(e, dict) else str(e) for e in rule.match_examples]
        out += [str(e) for e in rule.no_match_examples]
    return out


def _composition_examples() -> list[str]:
    out = []
    for composition in load_lexicon().compositions:
        out += [e["text"] if isinstance(e, dict) else str(e) for e in composition.match]
        out += [str(e) for e in composition.no_match]
    return out


def _test_module_strings() -> dict[str, list[str]]:
    found = {}
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if CLAIM not in (ast.get_docstring(tree) or "") or path.name == Path(__file__).name:
            continue
        found[path.name] = [node.value for node in ast.walk(tree)
                            if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return found


def test_phrase_rule_examples_are_not_corpus_sentences(corpus_texts: list[str]) -> None:
    examples = _rule_examples()
    assert len([e for e in examples if _sentence_sized(e)]) > 100
    assert _copied(examples, corpus_texts) == []


def test_lexicon_examples_are_not_corpus_sentences(corpus_texts: list[str]) -> None:
    examples = _composition_examples()
    assert len([e for e in examples if _sentence_sized(e)]) > 20
    assert _copied(examples, corpus_texts) == []


def test_version_outcome_examples_are_not_corpus_sentences(corpus_texts: list[str]) -> None:
    match, no_match = version_outcomes.examples()
    assert _copied([s for s, _ in match] + no_match, corpus_texts) == []


def test_unnamed_fact_examples_are_not_corpus_sentences(corpus_texts: list[str]) -> None:
    examples = [text for fact in unnamed.facts() for kind in ("named", "unnamed") for text in fact["examples"][kind]]
    assert examples and _copied(examples, corpus_texts) == []


def test_sentences_of_test_modules_that_claim_them_are_not_corpus_sentences(corpus_texts: list[str]) -> None:
    modules = _test_module_strings()
    assert {"test_lexicon.py", "test_words_general.py", "test_reported_experiments.py"} <= set(modules)
    copied = {name: _copied(strings, corpus_texts) for name, strings in modules.items()}
    assert {name: found for name, found in copied.items() if found} == {}


def test_the_check_catches_a_copied_sentence(corpus_texts: list[str]) -> None:
    sentence = next(t for t in corpus_texts if len(t) >= 80)
    copied = sentence[10:70]
    assert _copied([copied], corpus_texts) == [copied]
    assert _copied(["a sentence nobody in the corpus ever wrote, surely not"], corpus_texts) == []
