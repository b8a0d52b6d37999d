"""Seed incidents: valid, covering every domain, loaded once on the first start of an empty store."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest

from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.incidents import IncidentStore
from dsdoctor.kb.incidents.record import validate_new
from dsdoctor.kb.incidents.seed import SEED_PATH, load_seed_if_new

CATALOG = frozenset(load_catalog())
SEED = [json.loads(line) for line in SEED_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]


def _own(store) -> int:
    """Incidents other than the public ones (which every start loads besides the seed; export leaves them out)."""
    out = io.StringIO()
    return store.export_jsonl(out)


def test_seed_records_are_valid_against_the_catalog():
    for raw in SEED:
        validate_new(raw, CATALOG)


def test_seed_causes_exist_in_the_knowledge_base():
    try:
        from dsdoctor.kb.loader import get_kb

        causes = set(get_kb().causes)
    except Exception as exc:  # the knowledge base is maintained elsewhere; say why the check was skipped
        pytest.skip(f"knowledge base not loadable here: {exc}")
    missing = sorted({r["root_cause"] for r in SEED} - causes)
    assert not missing, f"seed incidents name causes the knowledge base lacks: {missing}"


def test_seed_covers_every_domain_in_both_languages():
    domains = Counter(r["root_cause"].split(".")[0] for r in SEED)
    assert {"config", "memory", "comm", "compute", "data", "hardware"} <= set(domains)
    assert 20 <= len(SEED) <= 40
    assert len({r["id"] for r in SEED}) == len(SEED)
    chinese = [r for r in SEED if any("\u4e00" <= ch <= "\u9fff" for ch in r["title"])]
    assert 8 <= len(chinese) <= len(SEED) - 8
    assert all(r["status"] != "resolved" or r["fix"] for r in SEED)


def test_first_start_loads_the_seed_once(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, valid_causes=CATALOG) as store:
        assert _own(store) == len(SEED)
        assert store.index_lag() == 0
        assert store.search("只有 rank 3 OOM")["items"][0]["id"] == "INC-SEED-01"
        store.delete("INC-SEED-01")
    with IncidentStore(dsdoctor_home, valid_causes=CATALOG) as store:
        assert _own(store) == len(SEED) - 1  # deleting a seed incident does not bring it back
        assert load_seed_if_new(store) == 0


def test_a_store_with_incidents_is_not_seeded(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, seed=False) as store:
        store.add({"title": "mine", "phenomenon": "x", "root_cause": "memory.fragmentation"})
    with IncidentStore(dsdoctor_home) as store:
        assert _own(store) == 1


def test_seed_lines_the_knowledge_base_rejects_are_skipped_with_a_warning(dsdoctor_home, caplog, store_backend):
    allowed = CATALOG - {"memory.fragmentation"}
    with IncidentStore(dsdoctor_home, valid_causes=allowed) as store:
        expected = sum(1 for r in SEED if r["root_cause"] != "memory.fragmentation")
        assert _own(store) == expected
    assert "unknown root cause 'memory.fragmentation'" in caplog.text
