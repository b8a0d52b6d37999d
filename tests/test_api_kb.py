"""/v1/kb: causes, symptoms, experiments and the graph (api/blueprints/kb_routes.py)."""

from __future__ import annotations

import json

from tests.test_api_support import api_app, assert_problem, client  # noqa: F401


def test_causes(client) -> None:
    items = client.get("/v1/kb/causes").get_json()["items"]
    assert [c["id"] for c in items] == sorted(c["id"] for c in items)
    assert {"compute.lr_divergence", "hardware.silent_data_corruption"} <= {c["id"] for c in items}
    compute = client.get("/v1/kb/causes?domain=compute").get_json()["items"]
    assert compute and all(c["domain"] == "compute" for c in compute)
    zh = client.get("/v1/kb/causes?lang=zh").get_json()["items"][0]
    assert zh["title"].endswith("（中文）")


def test_one_cause(client) -> None:
    cause = client.get("/v1/kb/causes/hardware.silent_data_corruption").get_json()
    assert cause["mechanisms"] == {"m.silent_wrong_compute": 0.9}
    assert cause["symptoms"]["s.nan_subset_ranks"] > cause["symptoms"].get("s.same_node_repeatedly", 0)
    assert cause["experiments"] == ["x.fixed_seed_data_order", "x.swap_suspect_gpu"]
    assert cause["fixes"][0]["kind"] == "ds_config"
    body = assert_problem(client.get("/v1/kb/causes/hardware.silent_data_corruptio"), 404)
    assert "hardware.silent_data_corruption" in body["detail"]  # did you mean


def test_symptoms_and_experiments(client) -> None:
    symptoms = client.get("/v1/kb/symptoms").get_json()["items"]
    assert "s.loss_nan" in {s["id"] for s in symptoms}
    experiments = client.get("/v1/kb/experiments").get_json()["items"]
    swap = next(x for x in experiments if x["id"] == "x.swap_suspect_gpu")
    assert [o["observe"] for o in swap["outcomes"]] == ["x.swap_suspect_gpu=issue_follows_gpu",
                                                         "x.swap_suspect_gpu=issue_stays"]
    assert "hardware.silent_data_corruption" in swap["tests"]


def test_graph_json_whole_and_around(client) -> None:
    whole = client.get("/v1/kb/graph").get_json()
    assert {"nodes", "edges"} <= set(whole)
    near = client.get("/v1/kb/graph?around=m.bad_input&depth=1").get_json()
    ids = {n["id"] for n in near["nodes"]}
    assert ids == {"m.bad_input", "data.corrupt_sample", "s.loss_nan", "s.nan_subset_ranks", "s.scope_single_rank"}
    assert len(near["nodes"]) < len(whole["nodes"])
    with_x = client.get("/v1/kb/graph?experiments=true").get_json()
    assert any(n["kind"] == "experiment" for n in with_x["nodes"])


def test_graph_dot_and_mermaid(client) -> None:
    dot = client.get("/v1/kb/graph?format=dot&around=data.corrupt_sample")
    assert dot.mimetype == "text/vnd.graphviz"
    assert dot.get_data(as_text=True).startswith("digraph") and '"data.corrupt_sample"' in dot.get_data(as_text=True)
    mermaid = client.get("/v1/kb/graph?format=mermaid")
    assert mermaid.mimetype == "text/plain" and mermaid.get_data(as_text=True).startswith("flowchart LR")
    json.loads(client.get("/v1/kb/graph?format=json").get_data(as_text=True))
    assert_problem(client.get("/v1/kb/graph?around=s.nope"), 404)
