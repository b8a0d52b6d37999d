"""The fast paths of extraction give exactly what the general paths give.

* ``LineMatcher.confirm`` reads RE2's spans directly for byte lines; the ``re2`` wrapper path
  (still used for text lines and very long lines) must agree on every rule example.
* Per-matcher plans and the line-rule fingerprint are cached across extractions, never stale.
* ``Collector.on_line`` skips the fact / series work for lines that capture none of those fields.
"""

from __future__ import annotations

import copy
import dataclasses

from bench.api_bench import multi_rank_log
from dsdoctor.rules import derive
from dsdoctor.rules import extract as extract_module
from dsdoctor.rules.context import parse_prefix
from dsdoctor.rules.extract import extract
from dsdoctor.rules.loader import default_rules
from dsdoctor.rules.matcher import LineMatcher, cached_fingerprint, cached_matcher
from dsdoctor.rules.ruleset import RuleSet
from dsdoctor.rules.settings import load_settings


def _line_matcher() -> LineMatcher:
    rules = default_rules()
    line_rules = rules.line_rules
    return cached_matcher(rules.fingerprint(line_rules), line_rules, utf8=False)


def _wrapper_only(matcher: LineMatcher) -> LineMatcher:
    slow = copy.copy(matcher)
    slow._fast = [(None, *rest) for _, *rest in matcher._fast]  # no RE2 object: the wrapper path
    return slow


def _example_lines(matcher: LineMatcher) -> list[bytes]:
    out: list[bytes] = []
    for rule in matcher.rules:
        for example in rule.match_examples:
            out.append(str(example["line"]).encode("utf-8"))
        out.extend(str(text).encode("utf-8") for text in rule.no_match_examples)
    return out


def test_fast_confirm_agrees_with_the_re2_wrapper_on_every_rule_example() -> None:
    fast = _line_matcher()
    slow = _wrapper_only(fast)
    assert any(raw is not None for raw, *_ in fast._fast)  # the fast path is really in use
    checked = 0
    for line in _example_lines(fast):
        start = parse_prefix(line).message_start
        for index in range(len(fast.rules)):
            a = fast.confirm(index, line, start)
            b = slow.confirm(index, line, start)
            assert (a is None) == (b is None), (fast.rules[index].id, line)
            if a is not None and b is not None:
                assert (a.groups, a.start, a.end, a.index) == (b.groups, b.start, b.end, b.index)
                checked += 1
    assert checked > 100


def test_fast_confirm_keeps_empty_groups_and_drops_unset_ones() -> None:
    fast = _line_matcher()
    slow = _wrapper_only(fast)
    index = next(i for i, r in enumerate(fast.rules) if r.id == "context.progress_loss")
    for line in (b"step=12 loss=2.5", b"loss: nan", b"[rank1]:x step=3, loss=0.25"):
        a, b = fast.confirm(index, line, 0), slow.confirm(index, line, 0)
        assert a is not None and b is not None
        assert a.groups == b.groups and (a.start, a.end) == (b.start, b.end)
    assert "step" not in fast.confirm(index, b"loss: nan", 0).groups


def test_extraction_is_the_same_with_and_without_the_fast_confirm(monkeypatch) -> None:
    text = multi_rank_log(40 * 1024)
    evidence = {"logs": [{"source": "job.log", "text": text}]}
    fast = extract(evidence)
    matcher = _line_matcher()
    monkeypatch.setattr(matcher, "_fast", [(None, *rest) for _, *rest in matcher._fast])
    slow = extract(evidence)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    assert fast.first_error is not None and fast.first_error.rank == 3
    assert {"s.cuda_oom", "s.nccl_watchdog_timeout", "s.scope_single_rank"} <= set(fast.symptoms)


def test_plans_are_built_once_per_matcher_and_settings() -> None:
    settings = load_settings()
    matcher = _line_matcher()
    assert extract_module._plan(matcher, settings) is extract_module._plan(matcher, settings)
    derive = copy.deepcopy(settings.derive)
    derive["derived_only"] = []
    other = dataclasses.replace(settings, derive=derive)
    plan = extract_module._plan(matcher, other)
    assert plan is not extract_module._plan(matcher, settings)
    assert plan.context_only == [extract_module._context_only(r, other) for r in matcher.rules]


def test_the_fingerprint_cache_follows_the_rules() -> None:
    rules = default_rules()
    line_rules = rules.line_rules
    assert cached_fingerprint(rules, line_rules) == rules.fingerprint(line_rules)
    fewer = RuleSet(line_rules[1:])
    assert cached_fingerprint(fewer, fewer.line_rules) == fewer.fingerprint(fewer.line_rules)
    assert cached_fingerprint(fewer, fewer.line_rules) != cached_fingerprint(rules, line_rules)
    phrase_rules = rules.phrase_rules
    assert cached_fingerprint(rules, phrase_rules) == rules.fingerprint(phrase_rules)


def test_frame_stage_patterns_are_compiled_once_per_setting() -> None:
    cfg = load_settings().derive
    assert derive._stage_matchers(cfg) is derive._stage_matchers(copy.deepcopy(cfg))
    assert derive.frame_stages([("save_checkpoint", "engine.py")], cfg) == ["checkpoint"]


def test_series_and_facts_are_still_read_from_hit_lines() -> None:
    """The loss series (NaN derivation) and the world size still come from the lines that print them."""
    text = "".join(f"[rank0]:[2024-05-01 10:00:{i:02d},000] [INFO] [engine.py:1:f] [Rank 0] step={i}, skipped=0, "
                   f"lr=[0.0001], mom=[(0.9, 0.95)] loss={'nan' if i > 20 else '1.0'}\n" for i in range(1, 31))
    x = extract({"logs": [{"source": "job.log", "text": text}]})
    assert "s.loss_nan" in x.symptoms
    assert x.phase == "steady" and x.ranks_seen == {0}
    finite = extract({"logs": [{"source": "job.log", "text": text.replace("loss=nan", "loss=1.0")}]})
    assert "s.loss_nan" not in finite.symptoms
