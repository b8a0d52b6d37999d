"""The REST API on the real knowledge base and rules (kb/data, rules/data): end to end.

These tests need the whole pipeline (kb.loader, rules.extract) and the seed cases; they check
behaviour through HTTP, not accuracy (bench/accuracy.py measures that).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from dsdoctor.api.server import EXAMPLE_EVIDENCE
from tests.test_api_support import assert_problem

ROOT = Path(__file__).resolve().parent.parent
SEED_CASES = sorted(p for p in (ROOT / "seed_cases").iterdir() if (p / "expected.yaml").is_file()) \
    if (ROOT / "seed_cases").is_dir() else []
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


@pytest.fixture(scope="module")
def real_client(tmp_path_factory):
    from dsdoctor.api.app import create_app

    app = create_app({"TESTING": True, "DSDOCTOR_HOME": str(tmp_path_factory.mktemp("real-home"))})
    yield app.test_client()
    app.extensions["dsdoctor"]["services"].close()


def test_the_curl_example_printed_by_serve_works(real_client) -> None:
    response = real_client.post("/v1/diagnoses", json=EXAMPLE_EVIDENCE)
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["causes"], body["summary"]
    assert body["causes"][0]["domain"] == "memory"
    assert 3 in {r for s in body["symptoms"] for r in s["ranks"]}
    assert body["next_experiments"] and body["next_experiments"][0]["outcomes"]


def test_readyz_is_ready(real_client) -> None:
    response = real_client.get("/readyz")
    assert response.status_code == 200, response.get_json()


def test_kb_routes_on_the_real_knowledge_base(real_client) -> None:
    causes = real_client.get("/v1/kb/causes").get_json()["items"]
    from dsdoctor.kb.catalog import load_catalog

    assert set(load_catalog()) <= {c["id"] for c in causes}
    first = causes[0]["id"]
    assert real_client.get(f"/v1/kb/causes/{first}").status_code == 200
    assert real_client.get(f"/v1/kb/graph?around={first}&format=mermaid").status_code == 200


@pytest.mark.parametrize("case", SEED_CASES[:6], ids=[c.name[:60] for c in SEED_CASES[:6]])
def test_seed_case_as_multipart_files(real_client, case: Path) -> None:
    expected = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8")) or {}
    data: dict = {"logs": [(io.BytesIO(p.read_bytes()), p.name) for p in sorted(case.iterdir())
                           if p.suffix in LOG_SUFFIXES and p.name != "description.txt"]}
    if (case / "ds_config.json").is_file():
        data["config"] = (io.BytesIO((case / "ds_config.json").read_bytes()), "ds_config.json")
    if (case / "environment.json").is_file():
        data["environment"] = (io.BytesIO((case / "environment.json").read_bytes()), "environment.json")
    if (case / "description.txt").is_file():
        data["description"] = (case / "description.txt").read_text(encoding="utf-8")
    response = real_client.post("/v1/diagnoses", data=data, content_type="multipart/form-data")
    if not data["logs"] and "description" not in data:
        assert_problem(response, 422)
        return
    assert response.status_code == 201, response.get_json()
    ranked = [c["id"] for c in response.get_json()["causes"]]
    if expected.get("root_cause"):
        assert ranked, "no cause ranked"


def test_nodes_in_words_are_read_like_the_cli_reads_them(real_client) -> None:
    # what a chat-ops bot relays: the machine count as a person writes it
    response = real_client.post("/v1/diagnoses", json={"description": "NCCL hangs at init",
                                                  "environment": {"nodes": "2x DGX A100"}})
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert (body["context"]["nodes"], body["context"]["world_size"]) == (2, 16)
    assert "s.multi_node_job" in {s["id"] for s in body["symptoms"]}
