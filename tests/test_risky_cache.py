"""The per-rule 'risky' facts of the fold path are kept in the disk cache and read back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsdoctor.rules import extract, matcher
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import configure_disk_cache, hyperscan_expression
from dsdoctor.rules.shapes import digit_blind, newline_free


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(matcher, "_DISK_CACHE", None)  # restored after the test, whatever it was
    configure_disk_cache(tmp_path)
    return tmp_path


def _patterns() -> list[str]:
    return [r.pattern for r in default_rules().line_rules][:80]


def _expected(patterns: list[str]) -> list[bool]:
    out = []
    for p in patterns:
        e = hyperscan_expression(p).decode("utf-8")
        out.append(not (digit_blind(e) and newline_free(e)))
    return out


def test_risky_facts_are_written_once_and_read_back(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    patterns = _patterns()
    first = extract._risky_of(patterns)
    assert first == _expected(patterns)
    assert True in first and False in first  # the sample holds both kinds, so a constant answer would fail
    stored = list(cache_dir.glob("risky-*.json"))
    assert len(stored) == 1

    def no_parsing(_: str) -> bool:
        raise AssertionError("the cached answer should be used")

    monkeypatch.setattr(extract, "digit_blind", no_parsing)
    assert extract._risky_of(patterns) == first


def test_another_rule_set_gets_its_own_entry(cache_dir: Path) -> None:
    patterns = _patterns()
    extract._risky_of(patterns)
    extract._risky_of(patterns[:-1])
    assert len(list(cache_dir.glob("risky-*.json"))) == 2


@pytest.mark.parametrize("damage", ["{not json", "[true]", '["yes"]', "{}"])
def test_a_damaged_entry_is_worked_out_again_and_rewritten(cache_dir: Path, damage: str) -> None:
    patterns = _patterns()
    extract._risky_of(patterns)
    (entry,) = cache_dir.glob("risky-*.json")
    entry.write_text(damage)
    assert extract._risky_of(patterns) == _expected(patterns)
    assert entry.read_text() != damage


def test_without_a_disk_cache_the_facts_are_worked_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matcher, "_DISK_CACHE", None)
    patterns = _patterns()
    assert extract._risky_of(patterns) == _expected(patterns)
