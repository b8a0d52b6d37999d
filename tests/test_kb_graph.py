"""kb.graph: noisy-OR likelihoods, paths, neighbourhoods, DOT/Mermaid/JSON exports, node views."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import networkx as nx
import pytest

from dsdoctor.kb import loader
from dsdoctor.kb.graph import (
    cause_likelihoods,
    describe,
    export_graph,
    mermaid_ids,
    neighbourhood,
    noisy_or_likelihood,
    paths,
    signature,
    to_dot,
    to_json,
    to_mermaid,
)
from dsdoctor.kb.loader import load_kb

FIXTURE = Path(__file__).parent / "fixtures" / "kb"


@pytest.fixture(scope="module")
def kb():
    loader.clear_cache()
    return load_kb([FIXTURE / "overlays" / "site"], data_dir=FIXTURE / "data")


def test_noisy_or_combines_paths_and_leak(kb):
    # s.suspicious_interface under the docker-bridge cause: one path, leak 0.02
    p = noisy_or_likelihood(kb, "s.suspicious_interface", "comm.network_interface.docker_bridge")
    assert p == pytest.approx(1 - (1 - 0.02) * (1 - 0.95 * 0.9))
    # unreached symptom: its leak
    assert noisy_or_likelihood(kb, "s.cuda_oom", "compute.fp16_overflow") == 0.01
    with pytest.raises(KeyError):
        noisy_or_likelihood(kb, "s.nope", "compute.fp16_overflow")


def test_two_paths_multiply_their_misses(kb):
    cause = kb.causes["memory.activation_memory"]
    both = type(cause)(**{**vars(cause), "mechanisms": {"m.activation_peak_exceeds": 0.5,
                                                          "m.allocator_no_contiguous_block": 0.5}})
    table = cause_likelihoods(both, kb.mechanisms, kb.symptoms)
    assert table["s.cuda_oom"] == pytest.approx(1 - 0.99 * (1 - 0.45) * (1 - 0.45))


def test_precomputed_table_matches_the_formula(kb):
    for cid, cause in kb.causes.items():
        assert kb.likelihoods[cid] == pytest.approx(cause_likelihoods(cause, kb.mechanisms, kb.symptoms))


def test_paths_strongest_first(kb):
    kb2 = load_kb([FIXTURE / "overlays" / "site"], data_dir=FIXTURE / "data")
    kb2.causes["comm.network_interface"].mechanisms["m.container_bridge_selected"] = 0.5
    found = paths(kb2, "comm.network_interface", "s.suspicious_interface")
    assert [p.mechanism for p in found] == ["m.wrong_interface_selected", "m.container_bridge_selected"]
    assert found[0].strength == pytest.approx(0.9 * 0.7)
    assert paths(kb, "compute.fp16_overflow", "s.cuda_oom") == []
    assert paths(kb, "no.such_cause", "s.cuda_oom") == []


def test_signature(kb):
    assert signature(kb, "memory.fragmentation") == {"s.cuda_oom", "s.oom_fragmented",
                                                     "s.mem_reserved_far_above_allocated"}
    assert signature(kb, "memory.fragmentation", threshold=0.7) == {"s.cuda_oom", "s.oom_fragmented"}


def test_neighbourhood_goes_both_ways(kb):
    full = export_graph(kb)
    one = neighbourhood(full, "m.wrong_interface_selected", 1)
    assert set(one) == {"m.wrong_interface_selected", "comm.network_interface", "s.suspicious_interface",
                        "s.nccl_watchdog_timeout", "s.single_node_ok"}
    two = neighbourhood(full, "s.suspicious_interface", 2)
    assert {"comm.network_interface", "comm.network_interface.docker_bridge"} <= set(two)
    assert "memory.fragmentation" not in two
    assert set(neighbourhood(full, "s.cuda_oom", 0)) == {"s.cuda_oom"}
    with pytest.raises(KeyError):
        neighbourhood(full, "s.nope", 1)


def test_export_graph_has_refines_and_optional_tests_edges(kb):
    plain = export_graph(kb)
    assert plain.edges["comm.network_interface.docker_bridge", "comm.network_interface"]["kind"] == "refines"
    assert not any(d["kind"] == "tests" for _, _, d in plain.edges(data=True))
    with_x = export_graph(kb, experiments=True, lang="zh")
    assert with_x.edges["x.expandable_segments", "memory.fragmentation"]["kind"] == "tests"
    assert with_x.nodes["memory.fragmentation"]["title"] == "显存碎片化"


def _weird_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_node('a"b', kind="cause", title='say "hi" <b> # & | [x] {y} `t` back\\slash\nline two')
    graph.add_node("a.b", kind="mechanism", title="graph TD")
    graph.add_node("a_b", kind="symptom", title="end")
    graph.add_edge('a"b', "a.b", strength=0.5)
    graph.add_edge("a.b", "a_b", strength=0.25)
    return graph


def test_dot_quotes_ids_and_escapes_labels():
    text = to_dot(_weird_graph())
    assert text.startswith('digraph "kb" {') and text.rstrip().endswith("}")
    assert '"a\\"b" -> "a.b" [label="0.5"];' in text
    assert 'say \\"hi\\" <b> # & | [x] {y} `t` back\\\\slash\\nline two' in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz not installed")
def test_dot_output_is_valid_graphviz(kb, tmp_path):
    for graph in (export_graph(kb, experiments=True, lang="zh"), _weird_graph()):
        run = subprocess.run(["dot", "-Tsvg"], input=to_dot(graph), capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert "<svg" in run.stdout


def test_mermaid_ids_are_safe_and_unique():
    ids = mermaid_ids(['a"b', "a.b", "a_b", "end"])
    assert len(set(ids.values())) == 4
    assert all(re.fullmatch(r"n_[A-Za-z0-9_]+", v) for v in ids.values())


def test_mermaid_escapes_labels():
    text = to_mermaid(_weird_graph())
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    node_lines = [ln for ln in lines if ln.startswith("  n_") and ("[" in ln or "(" in ln) and "--" not in ln]
    assert len(node_lines) == 3
    for line in node_lines:
        label = re.search(r'"(.*)"', line).group(1)
        assert not re.search(r'["<>`|\[\]{}]', label.replace("<br/>", "")), line
        assert "\n" not in label
    assert "#quot;hi#quot;" in text and "#lt;b#gt;" in text and "#35;" in text
    assert re.search(r"n_a_b_2? -->\|0\.25\| n_a_b", text)


def test_json_export(kb):
    doc = json.loads(to_json(neighbourhood(export_graph(kb), "memory.fragmentation", 2)))
    ids = {n["id"] for n in doc["nodes"]}
    assert {"memory.fragmentation", "m.allocator_no_contiguous_block", "s.oom_fragmented"} <= ids
    edge = next(e for e in doc["edges"] if e["source"] == "memory.fragmentation")
    assert edge == {"source": "memory.fragmentation", "target": "m.allocator_no_contiguous_block",
                    "kind": "causes", "strength": 0.9}


def test_describe_cause(kb):
    view = describe(kb, "memory.fragmentation", "zh")
    assert view["type"] == "cause" and view["title"] == "显存碎片化"
    assert [m["id"] for m in view["mechanisms"]] == ["m.allocator_no_contiguous_block"]
    assert view["symptoms"][0] == {
        "id": "s.cuda_oom", "title": "CUDA 显存不足", "likelihood": round(1 - 0.99 * 0.19, 4), "leak": 0.01,
        "via": [{"mechanism": "m.allocator_no_contiguous_block", "strength": 0.81}]}
    assert [x["id"] for x in view["experiments"]] == ["x.expandable_segments", "x.lower_micro_batch"]
    assert view["fixes"][0]["kind"] == "env" and view["regression"] and view["prevention"] and view["references"]


def test_describe_experiment_has_the_full_table(kb):
    view = describe(kb, "x.set_socket_ifname")
    assert [r["cause"] for r in view["table"]] == ["comm.network_interface", "comm.network_interface.docker_bridge",
                                                   "(default)"]
    assert view["table"][-1]["outcomes"] == {"issue_gone": 0.1, "issue_persists": 0.9}


def test_describe_symptom_and_mechanism(kb):
    symptom = describe(kb, "s.suspicious_interface")
    assert [c["id"] for c in symptom["causes"]] == ["comm.network_interface.docker_bridge", "comm.network_interface"]
    mechanism = describe(kb, "m.wrong_interface_selected")
    assert mechanism["causes"] == [{"id": "comm.network_interface", "strength": 0.9, "title": "Wrong network interface"}]
    with pytest.raises(KeyError):
        describe(kb, "nothing.here")
