"""What only the PostgreSQL incident backend has: no index to wait for, identifiers found by
substring (pg_trgm), several stores (replicas) on one database, cursors carrying their weights."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from dsdoctor.kb.incidents import IncidentStore, StaleVersionError, ValidationError
from dsdoctor.kb.incidents.pgsearch import translate

RECORD = {"title": "Two nodes hang at the first allreduce", "phenomenon": "NCCL picked docker0; 首个 allreduce 超时",
          "root_cause": "comm.network_interface", "fix": "export NCCL_SOCKET_IFNAME=bond0", "status": "resolved",
          "tags": ["nccl"]}


@pytest.fixture
def replicas(dsdoctor_home, pg_url):
    """Two stores on one database, each with its own data directory: two replicas in one process."""
    with IncidentStore(dsdoctor_home / "a", seed=False) as a, IncidentStore(dsdoctor_home / "b", seed=False) as b:
        yield a, b


def test_a_write_through_one_replica_is_found_through_the_other_at_once(replicas):
    a, b = replicas
    assert a.backend == b.backend == "postgresql"
    added = a.add({**RECORD, "id": "INC-1"})
    assert [i["id"] for i in b.search("docker0")["items"]] == ["INC-1"]
    assert b.site_cause_counts() == {"comm.network_interface": 1}
    b.update("INC-1", {"title": "Two nodes hang: docker0 again"})
    assert a.search("again")["total"] == 1 and a.get("INC-1")["version"] == added["version"] + 1
    b.delete("INC-1")
    assert a.search("docker0")["total"] == 0 and a.index_lag() == 0
    assert not (a.home / "incidents-index").exists() and not (a.home / "incidents.db").exists()


def test_versioned_updates_from_two_replicas_one_wins(replicas):
    a, b = replicas
    a.add({**RECORD, "id": "INC-1"})
    results: list[object] = []

    def change(store, text):
        try:
            results.append(store.update("INC-1", {"scope": text}, expected_version=1)["version"])
        except StaleVersionError as exc:
            results.append(exc)

    threads = [threading.Thread(target=change, args=(s, f"scope {n}")) for n, s in enumerate((a, b, a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r for r in results if isinstance(r, int)) == [2]
    assert sum(isinstance(r, StaleVersionError) for r in results) == 3
    assert a.get("INC-1")["version"] == 2


def test_an_identifier_is_found_by_a_part_of_it(replicas):
    a, _ = replicas
    a.add({**RECORD, "id": "INC-1"})
    a.add({**RECORD, "id": "INC-2", "fix": "unset NCCL_IB_DISABLE", "title": "IB disabled by accident"})
    assert [i["id"] for i in a.search("NCCL_SOCKET_IFNAME")["items"]] == ["INC-1"]
    assert [i["id"] for i in a.search("SOCKET_IFNAME")["items"]] == ["INC-1"]  # pg_trgm: a substring
    assert translate("SOCKET_IFNAME").where.count("identifiers LIKE") == 1
    assert {i["id"] for i in a.search("ncc*")["items"]} == {"INC-1", "INC-2"}
    marked = a.search("bon*")["items"][0]["highlights"]["fix"]
    assert "<mark>bond0</mark>" in marked


def test_odd_queries_answer_or_say_what_is_wrong(replicas):
    a, _ = replicas
    a.add({**RECORD, "id": "INC-1"})
    for q in ["(", "a AND", '"unbalanced', "title:", "OR OR", "x~2", "a*b", "id:INC-1", "tag:nc*", "*",
              "occurred_at:[2020 TO 2030]", "severity:[a TO z]", "'; DROP TABLE incidents; --", "%_\\"]:
        assert isinstance(a.search(q)["items"], list), q
    assert a.search("id:INC-1")["total"] == 1 and a.search("occurred_at:[2020 TO 2030]")["total"] == 1
    for q in ["*abc", "?", "[a TO b]"]:
        with pytest.raises(ValidationError):
            a.search(q)
    assert a.count() == 1


def test_pages_keep_the_weights_of_the_first_page_and_refuse_tampered_ones(replicas):
    a, b = replicas
    for n in range(7):
        a.add({**RECORD, "id": f"INC-{n}", "title": f"allreduce hang {n}" + " docker0" * (n % 3)})
    first = a.search("docker0 allreduce", limit=3)
    rest = b.search("docker0 allreduce", limit=10, cursor=first["next_cursor"])  # another replica
    assert [i["id"] for i in first["items"] + rest["items"]] == [i["id"] for i in a.search("docker0 allreduce")["items"]]
    raw = json.loads(base64.urlsafe_b64decode(first["next_cursor"] + "=="))
    raw["w"] = ["nan"] * len(raw["w"])
    forged = base64.urlsafe_b64encode(json.dumps(raw).encode()).decode().rstrip("=")
    assert len(a.search("docker0 allreduce", limit=10, cursor=forged)["items"]) == 4  # weights counted again


def test_a_nul_character_is_a_validation_error_not_a_database_error(replicas):
    a, _ = replicas
    with pytest.raises(ValidationError, match="phenomenon"):
        a.add({**RECORD, "phenomenon": "bad\x00byte"})
    a.add({**RECORD, "id": "INC-1"})
    with pytest.raises(ValidationError, match="fix"):
        a.update("INC-1", {"fix": "a\x00b"})
    with pytest.raises(ValidationError, match="line 1"):
        a.import_jsonl([json.dumps({**RECORD, "title": "x\x00"})])
