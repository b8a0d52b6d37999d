"""Incident records: validation of every field, defaults, normalisation and partial updates."""

from __future__ import annotations

import pytest

from dsdoctor.kb.incidents import ValidationError
from dsdoctor.kb.incidents.record import (
    RECORD_FIELDS,
    content_id,
    parse_timestamp,
    same_content,
    validate_new,
    validate_patch,
)

CAUSES = frozenset({"memory.fragmentation", "comm.slow_rank_exceeds_timeout", "hardware.gpu_lost"})


def record(**overrides):
    base = {"title": "rank 3 OOM", "phenomenon": "CUDA out of memory on rank 3", "root_cause": "memory.fragmentation"}
    base.update(overrides)
    return base


def messages(data, valid=CAUSES):
    with pytest.raises(ValidationError) as info:
        validate_new(data, valid)
    return info.value.messages


def test_minimal_record_gets_defaults_id_and_timestamps():
    out = validate_new(record(), CAUSES, now="2024-05-01T10:00:00Z")
    assert list(out) == list(RECORD_FIELDS)
    assert out["domain"] == "memory"
    assert out["severity"] == "medium" and out["status"] == "open"
    assert out["created_at"] == out["updated_at"] == out["occurred_at"] == "2024-05-01T10:00:00Z"
    assert out["id"].startswith("INC-20240501-")
    assert out["tags"] == [] and out["symptoms"] == [] and out["job"] == {} and out["diagnosis_id"] is None


def test_text_is_stripped_and_lists_are_normalised():
    out = validate_new(record(title="  显存碎片 OOM \n", tags=["OOM", "oom", "Slurm"],
                              symptoms=["s.cuda_oom", "s.oom_fragmented", "s.cuda_oom"]), CAUSES)
    assert out["title"] == "显存碎片 OOM"
    assert out["tags"] == ["oom", "slurm"]
    assert out["symptoms"] == ["s.cuda_oom", "s.oom_fragmented"]


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("id", "has space", "ids are 1-80 characters"),
    ("id", "", "ids are 1-80 characters"),
    ("title", "", "must not be empty"),
    ("title", "   ", "must not be empty"),
    ("title", 42, "must be text"),
    ("title", "x" * 301, "the limit is 300"),
    ("phenomenon", None, "Field may not be null"),
    ("scope", ["a"], "must be text"),
    ("root_cause_detail", "x" * 20_001, "the limit is 20000"),
    ("fix", True, "must be text"),
    ("severity", "urgent", "Must be one of"),
    ("status", "closed", "Must be one of"),
    ("tags", "oom", "Not a valid list"),
    ("tags", ["has space"], "without spaces or commas"),
    ("tags", ["a,b"], "without spaces or commas"),
    ("occurred_at", "yesterday", "is not an ISO date"),
    ("occurred_at", "2024-02-30", "is not a valid date"),
    ("occurred_at", "1970-01-01", "out of range"),
    ("created_at", 17, "expected an ISO date"),
    ("author", {"name": "x"}, "must be text"),
    ("diagnosis_id", "with space", "a diagnosis id is"),
    ("evidence_summary", 3.5, "must be text"),
    ("symptoms", ["cuda_oom"], "symptom IDs look like s.cuda_oom"),
    ("symptoms", "s.cuda_oom", "Not a valid list"),
])
def test_each_field_is_validated(field, value, fragment):
    problems = messages(record(**{field: value}))
    assert any(fragment in m for m in problems[field if field not in ("tags", "symptoms") or isinstance(value, str)
                                               else f"{field}.0"]), problems


@pytest.mark.parametrize(("job", "key", "fragment"), [
    ({"world_size": 0}, "job.world_size", "greater than or equal to 1"),
    ({"world_size": "8"}, "job.world_size", "must be a whole number"),
    ({"world_size": 8.0}, "job.world_size", "must be a whole number"),
    ({"node_count": True}, "job.node_count", "must be a whole number"),
    ({"world_size": 8, "node_count": 16}, "job.node_count", "exceeds world_size"),
    ({"versions": {"torch version": "2.3"}}, "job.versions.torch version.key", "version names"),
    ({"gpu": "A100"}, "job.gpu", "Unknown field"),
])
def test_job_facts_are_validated(job, key, fragment):
    problems = messages(record(job=job))
    assert any(fragment in m for m in problems[key]), problems


def test_missing_required_fields_are_all_reported():
    problems = messages({})
    assert set(problems) == {"title", "phenomenon", "root_cause"}


def test_unknown_field_is_refused():
    assert "Unknown field" in messages(record(colour="red"))["colour"][0]


def test_not_an_object_is_refused():
    assert "expected a JSON object" in messages(["a"])["record"][0]


def test_unknown_root_cause_names_the_valid_ids_and_the_closest():
    message = messages(record(root_cause="memory.fragmentaton"))["root_cause"][0]
    assert "Did you mean 'memory.fragmentation'?" in message
    for cause in CAUSES:
        assert cause in message


def test_unknown_root_cause_is_reported_with_other_errors():
    problems = messages(record(root_cause="memory.nope", severity="urgent"))
    assert "unknown root cause" in problems["root_cause"][0] and "severity" in problems


def test_without_a_cause_list_any_well_formed_cause_in_a_known_domain_passes():
    assert validate_new(record(root_cause="memory.some_site_cause"), None)["domain"] == "memory"
    assert "unknown domain" in messages(record(root_cause="gpu.broken"), None)["root_cause"][0]
    assert "not a cause ID" in messages(record(root_cause="Memory Fragmentation"), None)["root_cause"][0]


def test_domain_is_derived_and_a_contradicting_domain_refused():
    assert validate_new(record(domain="memory"), CAUSES)["domain"] == "memory"
    assert "disagrees" in messages(record(domain="comm"))["domain"][0]


def test_resolved_incident_needs_a_fix():
    assert "needs a fix" in messages(record(status="resolved"))["fix"][0]
    assert validate_new(record(status="resolved", fix="set expandable_segments"), CAUSES)["status"] == "resolved"


@pytest.mark.parametrize(("raw", "expected"), [
    ("2024-05-01", "2024-05-01T00:00:00Z"),
    ("2024-05-01T13:45:00Z", "2024-05-01T13:45:00Z"),
    ("2024-05-01T21:45:00+08:00", "2024-05-01T13:45:00Z"),
    ("2024-05-01 13:45", "2024-05-01T13:45:00Z"),
])
def test_timestamps_are_normalised_to_utc(raw, expected):
    assert parse_timestamp(raw) == expected
    assert validate_new(record(occurred_at=raw), CAUSES)["occurred_at"] == expected


def test_end_of_day_for_date_bounds():
    assert parse_timestamp("2024-05-01", end_of_day=True) == "2024-05-01T23:59:59Z"


def test_content_ids_are_stable_and_random_ids_are_not():
    one = validate_new(record(occurred_at="2024-05-01"), CAUSES, content_ids=True)
    two = validate_new(record(occurred_at="2024-05-01"), CAUSES, content_ids=True)
    assert one["id"] == two["id"] == content_id(one)
    assert validate_new(record(), CAUSES)["id"] != validate_new(record(), CAUSES)["id"]


def test_patch_changes_only_the_given_fields_and_merges_job():
    old = validate_new(record(job={"cluster": "a", "world_size": 8}, tags=["oom"]), CAUSES)
    new = validate_patch(old, {"status": "resolved", "fix": "expandable_segments", "job": {"node_count": 1}}, CAUSES)
    assert new["status"] == "resolved" and new["fix"] == "expandable_segments"
    assert new["job"] == {"cluster": "a", "world_size": 8, "node_count": 1}
    assert new["tags"] == ["oom"] and new["title"] == old["title"]


@pytest.mark.parametrize(("patch", "field", "fragment"), [
    ({"id": "OTHER"}, "id", "cannot be changed"),
    ({"created_at": "2020-01-01"}, "created_at", "cannot be changed"),
    ({"domain": "comm"}, "domain", "set by the store"),
    ({"title": ""}, "title", "must not be empty"),
    ({"status": "resolved"}, "fix", "needs a fix"),
    ({"root_cause": "memory.nope"}, "root_cause", "unknown root cause"),
    ({"job": {"world_size": 2, "node_count": 4}}, "job.node_count", "exceeds world_size"),
])
def test_patch_is_validated(patch, field, fragment):
    old = validate_new(record(), CAUSES)
    with pytest.raises(ValidationError) as info:
        validate_patch(old, patch, CAUSES)
    assert fragment in " ".join(info.value.messages[field])


def test_same_content_ignores_bookkeeping_timestamps():
    one = validate_new(record(), CAUSES, now="2024-01-01T00:00:00Z")
    two = dict(one, created_at="2025-01-01T00:00:00Z", updated_at="2025-01-02T00:00:00Z")
    assert same_content(one, two)
    assert not same_content(one, dict(one, fix="something"))


def test_validation_error_is_one_readable_line():
    with pytest.raises(ValidationError) as info:
        validate_new(record(title="", severity="x"), CAUSES)
    text = str(info.value)
    assert "\n" not in text and text.startswith("invalid incident: ")
    assert "severity" in text and "title" in text
    assert info.value.http_status == 422
