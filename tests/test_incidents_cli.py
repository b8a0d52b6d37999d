"""`dsdoctor incidents`: add, show, search, import, export, reindex; errors are one line."""

from __future__ import annotations

import json

import pytest

from dsdoctor.api.cli import main
from dsdoctor.kb.incidents.seed import PUBLIC_PATH

pytestmark = pytest.mark.usefixtures("store_backend")  # the commands on SQLite + Whoosh and on PostgreSQL


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["incidents", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_search_on_a_fresh_home_uses_the_seed(capsys):
    code, out, _ = run(capsys, "search", "显存碎片")
    assert code == 0
    assert "INC-SEED-03" in out
    assert "PUB-c3-verl-fsdp2-actor-oom" in out  # English only: the query is expanded to "fragmentation"


def test_search_json_has_items_facets_cursor_total(capsys):
    code, out, _ = run(capsys, "search", "checkpoint", "--limit", "2", "--format", "json")
    data = json.loads(out)
    assert code == 0 and set(data) == {"items", "facets", "next_cursor", "total", "total_is_estimate"}
    assert len(data["items"]) == 2 and data["total"] > 2 and data["next_cursor"]
    code, out, _ = run(capsys, "search", "checkpoint", "--limit", "2", "--cursor", data["next_cursor"], "--format", "json")
    assert {i["id"] for i in json.loads(out)["items"]}.isdisjoint({i["id"] for i in data["items"]})


def test_search_filters(capsys):
    code, out, _ = run(capsys, "search", "--domain", "hardware", "--severity", "critical", "--format", "json")
    items = json.loads(out)["items"]
    assert code == 0 and items and all(i["domain"] == "hardware" and i["severity"] == "critical" for i in items)


def test_add_from_options_then_show(capsys):
    code, out, _ = run(capsys, "add", "--id", "INC-T1", "--title", "只有 rank 5 OOM", "--root-cause",
                       "memory.fragmentation", "--phenomenon", "reserved but unallocated 18 GiB", "--status", "resolved",
                       "--fix", "expandable_segments:True", "--tag", "oom", "--world-size", "8", "--node-count", "1",
                       "--symptom", "s.oom_fragmented")
    assert code == 0 and "added INC-T1" in out
    code, out, _ = run(capsys, "show", "INC-T1", "--format", "json")
    record = json.loads(out)
    assert record["job"] == {"world_size": 8, "node_count": 1} and record["symptoms"] == ["s.oom_fragmented"]
    code, out, _ = run(capsys, "show", "INC-T1", "--lang", "zh")
    assert "根因: memory.fragmentation" in out and "修复" in out and "显存碎片" in out


def test_add_from_a_file(capsys, tmp_path):
    path = tmp_path / "incident.json"
    path.write_text(json.dumps({"title": "NCCL picked docker0", "phenomenon": "first allreduce timed out",
                                "root_cause": "comm.network_interface"}), encoding="utf-8")
    code, out, _ = run(capsys, "add", "--file", str(path), "--format", "json")
    assert code == 0 and json.loads(out)["domain"] == "comm"


@pytest.mark.parametrize(("args", "fragment"), [
    (["add", "--title", "x", "--phenomenon", "y", "--root-cause", "memory.fragmentaton"], "Did you mean 'memory.fragmentation'?"),
    (["add", "--title", "x", "--phenomenon", "y", "--root-cause", "memory.fragmentation", "--status", "resolved"],
     "needs a fix"),
    (["add", "--id", "INC-SEED-01", "--title", "x", "--phenomenon", "y", "--root-cause", "memory.fragmentation"],
     "already exists"),
    (["show", "NOPE"], "no incident with id 'NOPE'"),
    (["search", "x", "--since", "2024-13-01"], "since"),
    (["search", "x", "--cursor", "garbage"], "not a cursor"),
    (["import", "/nonexistent/file.jsonl"], "does not exist"),
])
def test_errors_are_one_line_without_traceback(capsys, args, fragment):
    code, _, err = run(capsys, *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert fragment in err


def test_add_file_with_other_options_is_a_usage_error(capsys, tmp_path):
    path = tmp_path / "i.json"
    path.write_text("{}", encoding="utf-8")
    code, _, err = run(capsys, "add", "--file", str(path), "--title", "x")
    assert code != 0 and "cannot be combined" in err


def test_export_import_roundtrip_and_reindex(capsys, tmp_path):
    target = tmp_path / "all.jsonl"
    code, _, err = run(capsys, "export", str(target))
    lines = target.read_text(encoding="utf-8").splitlines()
    assert code == 0 and f"exported {len(lines)} incident(s)" in err
    code, out, _ = run(capsys, "import", str(target))
    assert code == 0 and f"0 added, 0 updated, {len(lines)} unchanged" in out
    code, out, _ = run(capsys, "reindex")
    public = len(PUBLIC_PATH.read_text(encoding="utf-8").splitlines())  # shipped, loaded on start, never exported
    assert code == 0 and f"indexed {len(lines) + public} incident(s)" in out
    code, out, _ = run(capsys, "export")
    assert out.splitlines() == lines
