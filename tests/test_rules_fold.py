"""Regions of repeat lines counted by their digit-blind shapes (``_Reader._fold``): matches stay inside a
line, risky rules keep a region out, and the result is what reading every line gives."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.error_dense_bench import generate, victim_block
from dsdoctor.rules import extract as extract_module
from dsdoctor.rules.extract import extract
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import LineMatcher, hyperscan_expression, line_local
from dsdoctor.rules.ruleset import Rule
from dsdoctor.rules.shapes import newline_free
from tests.test_rules_error_dense import _straightforward, _view


def _rule(pattern: str, rule_id: str = "t.r") -> Rule:
    return Rule(id=rule_id, title="t", kind="log", pattern=pattern, symptom="s.x")


@pytest.mark.parametrize(("body", "local"), [
    (r"a\sb", r"a[\t\x0b\x0c\r ]b"),
    (r"[\s,]x", r"[\t\x0b\x0c\r ,]x"),
    (r"a[^x]b", r"a[^x\n]b"),
    (r"[^]x]", r"[^]x\n]"),
    (r"a\Db\Wc", r"a[^\d\n]b[^\w\n]c"),
    (r"[^\]]", r"[^\]\n]"),
    (r"a\\s", r"a\\s"),  # an escaped backslash, then a plain s
])
def test_line_local_narrows_what_could_match_a_newline(body: str, local: str) -> None:
    assert line_local(body) == local
    assert newline_free(local)


@pytest.mark.parametrize(("pattern", "free"), [
    (r"a[^x\n]b", True), (r"foo.*bar", True), (r"\d+\S+\w", True), (r"a\sb", False), (r"[^x]", False),
    (r"(?s)a.b", False), (r"a(?s:.)b", False), (r"x\ny", False), (r"\Dx", False), (r"(a)\1", False),
])
def test_newline_free_tells_whether_a_match_may_hold_a_newline(pattern: str, free: bool) -> None:
    assert newline_free(pattern) is free


def test_a_match_no_longer_reaches_back_into_the_line_before() -> None:
    m = LineMatcher([_rule(r"foo\s+bar"), _rule(r"x[^y]+z", "t.z")])
    text = b"foo\nbar baz\nx\nz\nfoo  bar\nxaz\n"
    lines = text.split(b"\n")
    hit_lines = sorted({text[:end].count(b"\n") for end, _ in m.scan(text)})
    assert [lines[i] for i in hit_lines] == [b"foo  bar", b"xaz"]


def test_every_shipped_rule_keeps_its_matches_inside_a_line() -> None:
    for rule in default_rules().line_rules:
        assert newline_free(hyperscan_expression(rule.pattern).decode()), rule.id


def _counting_folds(monkeypatch) -> list[int]:
    done = [0, 0]
    fold = extract_module._Reader._fold

    def counting(self, *args):
        out = fold(self, *args)
        done[out is None] += 1
        return out

    monkeypatch.setattr(extract_module._Reader, "_fold", counting)
    return done


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranks=st.integers(2, 300), blocks=st.integers(2, 4), seed=st.integers(0, 10_000),
       region=st.sampled_from([512, 4096, 65536]), drop=st.sampled_from([0.0, 0.02, 0.2]))
def test_folded_regions_show_what_reading_every_line_shows(tmp_path, monkeypatch, ranks, blocks, seed, region,
                                                           drop) -> None:
    path = tmp_path / f"job-{ranks}-{blocks}-{seed}-{region}.log"
    generate(path, ranks, blocks, seed)
    if drop:
        rng = random.Random(seed)
        path.write_bytes(b"".join(ln for ln in path.read_bytes().splitlines(keepends=True) if rng.random() >= drop))
    with monkeypatch.context() as m:
        m.setattr(extract_module._Reader, "fold_bytes", region)
        fast = extract({}, log_files=[("job", path)])
    assert _view(fast) == _view(_straightforward(monkeypatch, path))


def test_later_blocks_are_folded_and_counted_in_full(tmp_path, monkeypatch) -> None:
    path = tmp_path / "job.log"
    generate(path, 200, 4, seed=5)
    with monkeypatch.context() as m:
        m.setattr(extract_module._Reader, "fold_bytes", 4096)
        done = _counting_folds(m)
        fast = extract({}, log_files=[("job", path)])
    assert done[0] > 100 and done[1] > 0  # later blocks fold; the first block (new ranks) is read
    full = _straightforward(monkeypatch, path)
    assert fast.symptoms["s.nccl_watchdog_timeout"].count == full.symptoms["s.nccl_watchdog_timeout"].count
    assert _view(fast) == _view(full)


def test_a_region_a_digit_bearing_rule_hits_is_read_line_by_line(tmp_path, monkeypatch) -> None:
    """``SeqNum=[01]`` (a first collective timing out) tells digits apart: a region holding such a line is
    never counted by shape, and the line's own symptom is found."""
    lines: list[str] = []
    for block, seq in enumerate((4180, 1, 4181)):
        for rank in range(120):
            lines += victim_block(rank, seq, 1727980000.0 + block * 60 + rank * 0.01)
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with monkeypatch.context() as m:
        m.setattr(extract_module._Reader, "fold_bytes", 4096)
        done = _counting_folds(m)
        fast = extract({}, log_files=[("job", path)])
    assert done[0] > 0 and done[1] > 0
    first = fast.symptoms["s.timeout_first_collective"]
    # two lines a block name the timed-out work (the watchdog line and the reason of the abort): none folded away
    assert first.count == 2 * 120 and len(first.ranks) == 120
    assert _view(fast) == _view(_straightforward(monkeypatch, path))
