"""The per-rule facts of the fold and light paths ('risky', 'blind') are kept in the disk cache and read
back unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dsdoctor.rules import extract, matcher
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import configure_disk_cache, hyperscan_expression, relax_bounds
from dsdoctor.rules.shapes import digit_blind, newline_free


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(matcher, "_DISK_CACHE", None)  # restored after the test, whatever it was
    configure_disk_cache(tmp_path)
    return tmp_path


def _patterns() -> list[str]:
    return [r.pattern for r in default_rules().line_rules][:80]


def _risky(patterns: list[str]) -> list[bool]:
    out = []
    for p in patterns:
        e = hyperscan_expression(p).decode("utf-8")
        out.append(not (digit_blind(e) and newline_free(e)))
    return out


def _blind(patterns: list[str]) -> list[bool]:
    return [digit_blind(relax_bounds(p)) for p in patterns]


FACTS = [("risky", extract._risky_of, _risky), ("blind", extract._blind_of, _blind)]
Facts = Callable[[list[str]], list[bool]]


@pytest.mark.parametrize(("kind", "facts", "expected"), FACTS)
def test_facts_are_written_once_and_read_back(cache_dir: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
                                              facts: Facts, expected: Facts) -> None:
    patterns = _patterns()
    first = facts(patterns)
    assert first == expected(patterns)
    assert True in first and False in first  # the sample holds both kinds, so a constant answer would fail
    assert len(list(cache_dir.glob(f"{kind}-*.json"))) == 1

    def no_parsing(_: str) -> bool:
        raise AssertionError("the cached answer should be used")

    monkeypatch.setattr(extract, "digit_blind", no_parsing)
    assert facts(patterns) == first


def test_risky_and_blind_facts_of_one_rule_set_are_separate_entries(cache_dir: Path) -> None:
    patterns = _patterns()
    assert extract._risky_of(patterns) != extract._blind_of(patterns)
    assert len(list(cache_dir.glob("risky-*.json"))) == len(list(cache_dir.glob("blind-*.json"))) == 1


@pytest.mark.parametrize(("kind", "facts", "expected"), FACTS)
def test_another_rule_set_gets_its_own_entry(cache_dir: Path, kind: str, facts: Facts, expected: Facts) -> None:
    patterns = _patterns()
    facts(patterns)
    facts(patterns[:-1])
    assert len(list(cache_dir.glob(f"{kind}-*.json"))) == 2


@pytest.mark.parametrize("damage", ["{not json", "[true]", '["yes"]', "{}"])
@pytest.mark.parametrize(("kind", "facts", "expected"), FACTS)
def test_a_damaged_entry_is_worked_out_again_and_rewritten(cache_dir: Path, damage: str, kind: str, facts: Facts,
                                                           expected: Facts) -> None:
    patterns = _patterns()
    facts(patterns)
    (entry,) = cache_dir.glob(f"{kind}-*.json")
    entry.write_text(damage)
    assert facts(patterns) == expected(patterns)
    assert entry.read_text() != damage


@pytest.mark.parametrize(("kind", "facts", "expected"), FACTS)
def test_without_a_disk_cache_the_facts_are_worked_out(monkeypatch: pytest.MonkeyPatch, kind: str, facts: Facts,
                                                       expected: Facts) -> None:
    monkeypatch.setattr(matcher, "_DISK_CACHE", None)
    patterns = _patterns()
    assert facts(patterns) == expected(patterns)


def test_a_small_log_never_works_out_the_blind_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsdoctor.rules.settings import load_settings

    def not_needed(_: list[str]) -> list[bool]:
        raise AssertionError("a small log reads no light line: the blind facts are not needed")

    monkeypatch.setattr(extract, "_PLANS", {})  # a new plan, as in a new process
    monkeypatch.setattr(extract, "_blind_of", not_needed)
    x = extract.extract({"logs": [{"source": "rank0", "text": "[rank0]: torch.OutOfMemoryError: CUDA out of memory."}]},
                        rules=default_rules(), settings=load_settings())
    assert "s.cuda_oom" in x.symptoms
    assert extract._PLANS  # the extraction did build its plan
