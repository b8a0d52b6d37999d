"""Every seed case is diagnosed end to end and must meet its expected.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.evidence_files import load_case_dir
from kb.diagnosis import diagnose, ranked_catalog_causes

SEED_DIR = Path(__file__).resolve().parent.parent / "seed_cases"
CASES = sorted(p for p in SEED_DIR.iterdir() if p.is_dir())


def test_there_are_at_least_twenty_seed_cases():
    assert len(CASES) >= 20


@pytest.mark.parametrize("folder", CASES, ids=lambda p: p.name)
def test_seed_case_meets_its_expectation(folder: Path, real_kb):
    evidence, log_files, expected = load_case_dir(folder)
    result = diagnose(evidence, kb=real_kb, log_files=log_files, top=10)
    ranked = ranked_catalog_causes(real_kb, result)
    acceptable = {expected["root_cause"], *expected.get("also_ok", [])}
    assert ranked and ranked[0] in acceptable, f"top cause {ranked[:3]}, expected {sorted(acceptable)}"
    for cause in expected.get("top3", []):
        assert cause in ranked[:3], f"{cause} not in top 3 {ranked[:3]}"
    for cause in expected.get("not_top3", []):
        assert cause not in ranked[:3], f"{cause} should not be in top 3 {ranked[:3]}"
    if expected.get("scope"):
        assert result["scope"] == expected["scope"]
    if expected.get("first_error_rank") is not None:
        assert result["first_error"] and result["first_error"]["rank"] == expected["first_error_rank"]
