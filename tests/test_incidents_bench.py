"""bench/search_bench.py: the generated incidents are valid and a tiny run completes."""

from __future__ import annotations

import json

from bench import search_bench
from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.incidents.record import validate_new


def test_generated_incidents_are_valid_mixed_and_about_one_kilobyte():
    catalog = load_catalog()
    records = search_bench.generate(60, catalog)
    for r in records:
        validate_new(r, frozenset(catalog))
    sizes = [len(json.dumps(r, ensure_ascii=False).encode("utf-8")) for r in records]
    assert 800 < sum(sizes) / len(sizes) < 1600
    assert any("\u4e00" <= ch <= "\u9fff" for ch in records[0]["phenomenon"])
    assert search_bench.generate(5, catalog) == search_bench.generate(5, catalog)  # deterministic


def test_a_tiny_run_reports_whoosh_and_fts5(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert search_bench.main(["--n", "120", "--repeats", "1", "--procs", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["whoosh"]["indexed"] == 120 and data["whoosh"]["search"]["p95_ms"] > 0
    assert data["fts5"]["search"]["p50_ms"] > 0
    assert "goals" in capsys.readouterr().out


def test_a_tiny_run_reports_postgresql_next_to_whoosh(pg_cluster, tmp_path, capsys):
    out = tmp_path / "r.json"
    url = pg_cluster.create_database()
    assert search_bench.main(["--n", "120", "--repeats", "1", "--procs", "1", "--skip-fts5", "--pg-url", url,
                              "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["postgresql"]["indexed"] == data["whoosh"]["indexed"] == 120
    assert data["postgresql"]["search"]["p95_ms"] > 0
    assert "side by side at 120" in capsys.readouterr().out
