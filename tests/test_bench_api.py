"""The API bench's varied workload: real reports, every request unique, all accepted."""

from __future__ import annotations

import json

from bench.api_bench import varied_bodies
from tests.test_api_support import api_app, client  # noqa: F401


def test_varied_requests_are_unique_real_reports_the_api_accepts(client):
    body = varied_bodies()
    bodies = [body(n) for n in range(50)]
    assert len(set(bodies)) == len(bodies)
    nonces = {json.loads(b)["environment"]["versions"]["bench_nonce"] for b in bodies}
    assert len(nonces) == len(bodies)  # the ranking memo keys on the versions: none answers from memory
    for raw in bodies[:45]:  # every corpus report once, and a second lap
        response = client.post("/v1/diagnoses", data=raw, content_type="application/json")
        assert response.status_code == 201, response.get_json()
