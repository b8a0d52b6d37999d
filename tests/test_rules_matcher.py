"""The matcher: Hyperscan reports each (rule, line) once; RE2 confirms and captures."""

from __future__ import annotations

import pytest

from dsdoctor.rules.matcher import LineMatcher, hyperscan_expression, translate
from dsdoctor.rules.ruleset import Rule


def rule(pattern: str, rule_id: str = "t.r", **kw) -> Rule:
    return Rule(id=rule_id, title="t", kind=kw.pop("kind", "log"), pattern=pattern, symptom="s.x", **kw)


@pytest.mark.parametrize(("pattern", "body", "anchored"), [
    ("^Traceback", "Traceback", True),
    (r"\AError", "Error", True),
    ("foo$", "foo", False),
    ("[^^]x", "[^^]x", False),
    (r"a\^b", r"a\^b", False),
    ("(?:^|[ ,])loss=", "(?:|[ ,])loss=", True),
    ("[]^]z", "[]^]z", False),
])
def test_translate(pattern: str, body: str, anchored: bool) -> None:
    assert translate(pattern) == (body, anchored)


def test_expression_ends_at_the_line_end() -> None:
    assert hyperscan_expression("a(?P<n>\\d+)") == b"(?:a(?P<n>\\d+)).*$"


def test_one_report_per_rule_and_line_however_often_it_occurs() -> None:
    m = LineMatcher([rule("nan"), rule(r"loss=\d+", "t.loss")])
    text = b"nan nan nan nan loss=1 loss=2 nan\nclean line\nnan\n"
    hits = m.scan(text)
    first_end, last_end = text.index(b"\n"), text.rindex(b"\n")
    assert sorted(hits) == [(first_end, 0), (first_end, 1), (last_end, 0)]


def test_confirm_extracts_named_groups_as_text() -> None:
    m = LineMatcher([rule(r"allocate (?P<size>\d+\.\d+ GiB)")])
    got = m.confirm(0, b"Tried to allocate 2.00 GiB. GPU 0")
    assert got is not None and got.groups == {"size": "2.00 GiB"}


def test_anchored_rules_match_the_message_after_the_prefix() -> None:
    m = LineMatcher([rule("^Traceback")])
    line = b"[rank3]: Traceback (most recent call last):"
    assert m.confirm(0, line, message_start=0) is None
    assert m.confirm(0, line, message_start=9) is not None


def test_caseless_rules() -> None:
    m = LineMatcher([rule("connection refused", caseless=True)])
    assert m.match_line("NCCL WARN Connect to 10.0.0.1 failed : Connection Refused")


def test_hyperscan_prefilter_is_confirmed_by_re2() -> None:
    # Hyperscan ignores the anchor; RE2 rejects a line whose message does not start with it
    m = LineMatcher([rule("^Error: x")])
    assert m.match_line(b"see Error: x") == []


def test_phrase_rules_match_chinese_text() -> None:
    m = LineMatcher([rule("显存不足|爆显存", kind="phrase", caseless=True)], utf8=True)
    found = m.match_line("训练到第二步就爆显存了")
    assert found and found[0].start == 7  # character offset


def test_long_line_is_matched_at_its_end_too() -> None:
    m = LineMatcher([rule("Watchdog caught")])
    line = b"x" * 300_000 + b" Watchdog caught"
    assert m.confirm(0, line) is not None


def test_empty_input_and_no_rules() -> None:
    assert LineMatcher([rule("x")]).scan(b"") == []
    assert LineMatcher([]).scan(b"anything") == []
