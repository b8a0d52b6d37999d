"""A corpus of healthy training logs (tests/fixtures/healthy) must raise no error-severity symptom.

Checked with the real rule data: DeepSpeed/NCCL init lines, torchrun banners, fp16 OVERFLOW lines while
the loss scale settles, progress lines, checkpoint saves and the destroy_process_group() exit warning
are normal output.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from dsdoctor.rules.extract import extract
from dsdoctor.rules.loader import load_rules_with_problems
from tests.rulesfx import FIXTURES

HEALTHY = sorted((FIXTURES / "healthy").glob("*.log"))


@functools.cache
def real_rules():
    return load_rules_with_problems()[0]


@pytest.mark.parametrize("path", HEALTHY, ids=[p.name for p in HEALTHY])
def test_healthy_log_raises_no_error(path: Path) -> None:
    rules = real_rules()
    severity = {r.id: r.severity for r in rules.rules}
    x = extract({}, log_files=[(path.stem, path)], rules=rules)
    errors = {sid: sorted(o.rules) for sid, o in x.symptoms.items()
              if any(severity.get(rule) == "error" for rule in o.rules)}
    assert not errors, errors
    assert x.first_error is None or x.first_error.symptom not in errors
    assert "s.fp16_overflow_repeated" not in x.symptoms
    assert x.lines_processed > 200


def test_corpus_is_present() -> None:
    assert len(HEALTHY) >= 3


def test_warm_up_overflows_are_recognised_as_normal() -> None:
    path = FIXTURES / "healthy" / "deepspeed_zero2_fp16_8gpu.log"
    x = extract({"environment": {"nodes": 1}}, log_files=[("train", path)], rules=real_rules())
    assert "s.fp16_overflow_early_only" in x.symptoms
    assert "s.ib_not_used" not in x.symptoms  # "Using network Socket" is normal on one node
