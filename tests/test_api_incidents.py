"""/v1/incidents: create, read, change, delete, search, similar (api/blueprints/incidents.py)."""

from __future__ import annotations

import pytest

from tests.test_api_support import api_app, assert_problem, client  # noqa: F401

pytestmark = pytest.mark.usefixtures("store_backend")  # every endpoint on SQLite + Whoosh and on PostgreSQL

RECORD = {"title": "Loss NaN on rank 3 only", "phenomenon": "rank 3 reports loss is nan at step 120; 显存正常",
          "root_cause": "hardware.silent_data_corruption", "severity": "high", "tags": ["gpu"],
          "symptoms": ["s.loss_nan", "s.nan_subset_ranks"], "occurred_at": "2024-05-01"}


def _add(client, **changes):
    response = client.post("/v1/incidents", json={**RECORD, **changes})
    assert response.status_code == 201, response.get_json()
    return response


def test_create_get_patch_delete(client) -> None:
    response = _add(client)
    incident = response.get_json()
    assert response.headers["Location"] == f"/v1/incidents/{incident['id']}"
    assert incident["domain"] == "hardware" and incident["status"] == "open"
    assert client.get(f"/v1/incidents/{incident['id']}").get_json() == incident
    patched = client.patch(f"/v1/incidents/{incident['id']}", json={"status": "resolved", "fix": "swapped GPU 3"})
    assert patched.status_code == 200 and patched.get_json()["status"] == "resolved"
    assert_problem(client.patch(f"/v1/incidents/{incident['id']}", json={"id": "other"}), 422, field="id")
    assert_problem(client.patch(f"/v1/incidents/{incident['id']}", json={"status": "resolved", "fix": ""}), 422,
                   field="fix")
    deleted = client.delete(f"/v1/incidents/{incident['id']}")
    assert deleted.status_code == 204 and deleted.get_data() == b""
    assert_problem(client.get(f"/v1/incidents/{incident['id']}"), 404)


def test_conflict_on_existing_id(client) -> None:
    _add(client, id="INC-1")
    assert_problem(client.post("/v1/incidents", json={**RECORD, "id": "INC-1"}), 409)


def test_secrets_in_incidents_are_redacted(client) -> None:
    incident = _add(client, fix="rotated password=hunter2").get_json()
    assert "hunter2" not in incident["fix"]


def test_search_filters_facets_and_cursor(client) -> None:
    for n in range(3):
        _add(client, title=f"NaN on rank {n}", occurred_at=f"2024-05-0{n + 1}")
    _add(client, title="Loss exploded everywhere", root_cause="compute.lr_divergence", severity="low",
         phenomenon="loss grows on all ranks then nan", occurred_at="2024-06-01")
    everything = client.get("/v1/incidents").get_json()
    assert set(everything) >= {"items", "facets", "next_cursor"}
    assert len(everything["items"]) == 4
    assert everything["facets"]["domain"] == {"hardware": 3, "compute": 1}
    found = client.get("/v1/incidents?q=exploded").get_json()
    assert [i["title"] for i in found["items"]] == ["Loss exploded everywhere"]
    assert len(client.get("/v1/incidents?cause=compute.lr_divergence").get_json()["items"]) == 1
    assert len(client.get("/v1/incidents?severity=high&domain=hardware").get_json()["items"]) == 3
    assert len(client.get("/v1/incidents?tag=gpu").get_json()["items"]) == 4
    assert len(client.get("/v1/incidents?since=2024-05-02&until=2024-05-31").get_json()["items"]) == 2
    chinese = client.get("/v1/incidents?q=显存").get_json()
    assert len(chinese["items"]) == 3 and all("显存" in i["phenomenon"] for i in chinese["items"])
    page = client.get("/v1/incidents?limit=3").get_json()
    rest = client.get(f"/v1/incidents?limit=3&cursor={page['next_cursor']}").get_json()
    assert len(page["items"]) == 3 and len(rest["items"]) == 1 and rest["next_cursor"] is None
    assert {i["id"] for i in page["items"]}.isdisjoint({i["id"] for i in rest["items"]})


def test_similar(client) -> None:
    first = _add(client).get_json()
    twin = _add(client, title="Rank 3 NaN again").get_json()
    _add(client, title="Unrelated", root_cause="compute.lr_divergence", symptoms=["s.scope_global"],
         phenomenon="divergence")
    items = client.get(f"/v1/incidents/{first['id']}/similar?limit=2").get_json()["items"]
    assert items[0]["id"] == twin["id"] and 0 < items[0]["score"] <= 1
    assert_problem(client.get(f"/v1/incidents/{first['id']}/similar?limit=0"), 422, field="limit")


def test_issue14_etag_and_if_match_refuse_a_lost_update(client) -> None:
    created = _add(client)
    incident = created.get_json()
    assert incident["version"] == 1 and created.headers["ETag"] == '"1"'
    url = f"/v1/incidents/{incident['id']}"
    assert client.get(url).headers["ETag"] == '"1"'
    first = client.patch(url, json={"fix": "swapped GPU 3"}, headers={"If-Match": '"1"'})
    assert first.status_code == 200 and first.headers["ETag"] == '"2"' and first.get_json()["version"] == 2
    stale = client.patch(url, json={"fix": "an older idea"}, headers={"If-Match": '"1"'})
    assert_problem(stale, 412)
    assert client.get(url).get_json()["fix"] == "swapped GPU 3"
    assert client.patch(url, json={"scope": "rank 3"}, headers={"If-Match": "*"}).headers["ETag"] == '"3"'
    assert_problem(client.patch(url, json={"scope": "x"}, headers={"If-Match": "yesterday"}), 400)
    assert_problem(client.patch(url, json={"version": 7}), 422, field="version")


def test_issue14_concurrent_patches_of_one_version_exactly_one_wins(api_app) -> None:
    import threading

    clients = [api_app.test_client() for _ in range(8)]
    incident = _add(clients[0]).get_json()
    barrier = threading.Barrier(len(clients))
    codes: list[int] = []

    def patch(n: int) -> None:
        barrier.wait()
        codes.append(clients[n].patch(f"/v1/incidents/{incident['id']}", json={"fix": f"fix {n}"},
                                      headers={"If-Match": '"1"'}).status_code)

    threads = [threading.Thread(target=patch, args=(n,)) for n in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [200] + [412] * 7
